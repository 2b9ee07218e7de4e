package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// DIG states (SPEC section 4).
const (
	StateCreated            = "Created"
	StateApproved           = "Approved"
	StateInstantiated       = "Instantiated"
	StateTerminated         = "Terminated"
	StateUpdated            = "Updated"
	StateInstantiateStopped = "InstantiateStopped"
	StateTerminateStopped   = "TerminateStopped"
)

// StateAction is one entry of a DIG's history, as EMCO renders it.
type StateAction struct {
	State     string    `json:"State" bson:"state"`
	ContextID string    `json:"ContextId" bson:"contextId"`
	TimeStamp time.Time `json:"TimeStamp" bson:"timeStamp"`
}

// DIGState is a DIG's lifecycle: its history, the context of its latest
// instantiation, and the status context id that labels its objects.
type DIGState struct {
	Current         string        `json:"-" bson:"current"`
	Actions         []StateAction `json:"Actions" bson:"actions"`
	ContextID       string        `json:"-" bson:"contextId"`
	StatusContextID string        `json:"-" bson:"statusContextId"`
	Contexts        []string      `json:"-" bson:"contexts"`
}

func (c *Catalog) digStates() *mongo.Collection { return c.db.Collection("digstate") }

func digFilter(key Key) bson.D { return keyFilter(DeploymentIntentGroups, key) }

// keyFilter matches the objects of kind whose key starts with key.
func keyFilter(kind *Kind, key Key) bson.D {
	f := bson.D{}
	for i, field := range kind.KeyFields()[:len(key)] {
		f = append(f, bson.E{Key: field, Value: key[i]})
	}
	return f
}

// GetDIGState returns a DIG's state; a DIG never acted on is Created.
func (c *Catalog) GetDIGState(ctx context.Context, key Key) (DIGState, error) {
	st, _, err := c.getDIGState(ctx, key)
	return st, err
}

// getDIGState also reports whether the state document exists yet.
func (c *Catalog) getDIGState(ctx context.Context, key Key) (DIGState, bool, error) {
	var st DIGState
	err := c.digStates().FindOne(ctx, digFilter(key)).Decode(&st)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return DIGState{Current: StateCreated, Actions: []StateAction{}}, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read DIG state: %w", err)
	}
	return st, true, nil
}

// TransitionDIG moves a DIG to next.State if its current state is one of
// from, appending next to the history; contextID and statusID, when not
// empty, become the DIG's current ones. The check and the write are one
// conditional update, so two concurrent actions cannot both pass.
func (c *Catalog) TransitionDIG(ctx context.Context, key Key, from []string, next StateAction, statusID string) (DIGState, error) {
	for attempt := 0; attempt < 3; attempt++ {
		cur, exists, err := c.getDIGState(ctx, key)
		if err != nil {
			return cur, err
		}
		if !contains(from, cur.Current) {
			return cur, errdefs.Conflict("the deployment intent group is %s; this action needs it to be %s", cur.Current, strings.Join(from, " or "))
		}
		set := bson.D{{Key: "current", Value: next.State}}
		if next.ContextID != "" {
			set = append(set, bson.E{Key: "contextId", Value: next.ContextID})
		}
		if statusID != "" {
			set = append(set, bson.E{Key: "statusContextId", Value: statusID})
		}
		update := bson.D{{Key: "$set", Value: set}, {Key: "$push", Value: bson.D{{Key: "actions", Value: next}}}}
		if next.ContextID != "" && !contains(cur.Contexts, next.ContextID) {
			update = append(update, bson.E{Key: "$addToSet", Value: bson.D{{Key: "contexts", Value: next.ContextID}}})
		}
		if !exists {
			// First action: create the document (key fields set explicitly,
			// as a FerretDB upsert does not copy them from the filter).
			doc := append(digFilter(key),
				bson.E{Key: "current", Value: next.State},
				bson.E{Key: "actions", Value: []StateAction{next}},
				bson.E{Key: "contextId", Value: next.ContextID},
				bson.E{Key: "statusContextId", Value: statusID},
				bson.E{Key: "contexts", Value: nonEmpty(next.ContextID)})
			_, err := c.digStates().InsertOne(ctx, doc)
			if mongo.IsDuplicateKeyError(err) {
				continue // someone else acted first; re-read
			}
			if err != nil {
				return cur, fmt.Errorf("write DIG state: %w", err)
			}
			return c.GetDIGState(ctx, key)
		}
		filter := append(digFilter(key), bson.E{Key: "current", Value: cur.Current}, bson.E{Key: "actions", Value: bson.D{{Key: "$size", Value: len(cur.Actions)}}})
		res, err := c.digStates().UpdateOne(ctx, filter, update)
		if err != nil {
			return cur, fmt.Errorf("write DIG state: %w", err)
		}
		if res.MatchedCount == 1 {
			return c.GetDIGState(ctx, key)
		}
	}
	return DIGState{}, errdefs.Conflict("the deployment intent group changed concurrently; try again")
}

// DeleteDIGState removes a DIG's state with the DIG.
func (c *Catalog) DeleteDIGState(ctx context.Context, key Key) error {
	_, err := c.digStates().DeleteOne(ctx, digFilter(key))
	return err
}

func (c *Catalog) ensureDIGStateIndex(ctx context.Context) error {
	keys := bson.D{}
	for _, f := range DeploymentIntentGroups.KeyFields() {
		keys = append(keys, bson.E{Key: f, Value: 1})
	}
	_, err := c.digStates().Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: options.Index().SetUnique(true).SetName("key")})
	return err
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func nonEmpty(s string) []string {
	if s == "" {
		return []string{}
	}
	return []string{s}
}
