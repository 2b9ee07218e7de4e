package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Lifecycle states: a DIG's (SPEC section 4), and a cluster's network
// intents' (Created, Applied, Terminated).
const (
	StateApplied            = "Applied"
	StateCreated            = "Created"
	StateApproved           = "Approved"
	StateInstantiated       = "Instantiated"
	StateTerminated         = "Terminated"
	StateUpdated            = "Updated"
	StateInstantiateStopped = "InstantiateStopped"
	StateTerminateStopped   = "TerminateStopped"
	// StateDeleting locks a lifecycle while its owner is deleted; it is no
	// user action and never enters the history.
	StateDeleting = "Deleting"
)

// StateAction is one entry of a DIG's history, as EMCO renders it.
// Revision numbers the desired states of one context: its instantiation
// is 1, each update or rollback the next (0 for actions that make none).
type StateAction struct {
	State     string    `json:"State" bson:"state"`
	ContextID string    `json:"ContextId" bson:"contextId"`
	TimeStamp time.Time `json:"TimeStamp" bson:"timeStamp"`
	Revision  int64     `json:"Revision,omitempty" bson:"revision,omitempty"`
}

// NextRevision, as a StateAction's Revision, asks Transition to number
// the action one past the latest revision of its context, in the same
// conditional write, so two updates never get the same number.
const NextRevision = -1

// LatestRevision is the newest revision recorded for a context (0 when
// none was: a lifecycle from before revisions were recorded counts its
// instantiation as 1 and each update as one more, as the status did).
func (s DIGState) LatestRevision(contextID string) int64 {
	var latest, counted int64
	for _, a := range s.Actions {
		if a.ContextID != contextID {
			continue
		}
		switch {
		case a.Revision > 0:
			latest, counted = a.Revision, a.Revision
		case a.State == StateInstantiated:
			counted = 1
		case a.State == StateUpdated:
			counted++
		}
	}
	return max(latest, counted)
}

// DIGState is a lifecycle (a DIG's, or a cluster's network intents'): its
// history, the context of its latest instantiation, and the status context
// id that labels its objects.
type DIGState struct {
	Current         string        `json:"-" bson:"current"`
	Actions         []StateAction `json:"Actions" bson:"actions"`
	ContextID       string        `json:"-" bson:"contextId"`
	StatusContextID string        `json:"-" bson:"statusContextId"`
	Contexts        []string      `json:"-" bson:"contexts"`
}

func (c *Catalog) digStates() *mongo.Collection { return c.db.Collection("lifecycle") }

func groupFilter(group string) bson.D { return bson.D{{Key: "group", Value: group}} }

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
	return c.GetState(ctx, DIGGroup(key))
}

// GetState returns a lifecycle's state; one never acted on is Created.
// With an index it is read from etcd (every write to a lifecycle copies
// it there, see stateWrite), so status, history and notifications keep
// answering while MongoDB does not; a lock for a delete whose process
// died is judged, and put back, in MongoDB.
func (c *Catalog) GetState(ctx context.Context, group string) (DIGState, error) {
	if x := c.index(); x != nil {
		doc, _, err := x.read(ctx, lifecycles, Key{group})
		if err != nil {
			return DIGState{}, err
		}
		if doc == nil {
			return DIGState{Current: StateCreated, Actions: []StateAction{}}, nil
		}
		var st DIGState
		if err := bson.Unmarshal(doc, &st); err != nil {
			return st, fmt.Errorf("read DIG state: %w", err)
		}
		if st.Actions == nil {
			st.Actions = []StateAction{}
		}
		if st.Current != StateDeleting {
			return st, nil
		}
		if _, stale := c.staleDoc(ctx, doc, fieldDeleting, fieldDeletingBy); !stale {
			return st, nil
		}
	}
	st, _, err := c.getState(ctx, group)
	return st, err
}

// getState reads a lifecycle's state from MongoDB, as the writes that are
// conditional on it must, and also reports whether its document exists
// yet.
func (c *Catalog) getState(ctx context.Context, group string) (DIGState, bool, error) {
	for attempt := 0; ; attempt++ {
		raw, err := c.digStates().FindOne(ctx, groupFilter(group)).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return DIGState{Current: StateCreated, Actions: []StateAction{}}, false, nil
		}
		if err != nil {
			return DIGState{}, false, fmt.Errorf("read DIG state: %w", err)
		}
		var st DIGState
		if err := bson.Unmarshal(raw, &st); err != nil {
			return st, false, fmt.Errorf("read DIG state: %w", err)
		}
		// A lock for a delete whose process died (another replica's, see
		// Owner) goes back at once, not at the next start-up.
		if st.Current != StateDeleting || attempt > 0 {
			return st, true, nil
		}
		if _, stale := c.staleDoc(ctx, raw, fieldDeleting, fieldDeletingBy); !stale {
			return st, true, nil
		}
		if err := c.unlock(ctx, group); err != nil {
			return st, true, err
		}
	}
}

// TransitionDIG moves a DIG to next.State if its current state is one of
// from, appending next to the history; contextID and statusID, when not
// empty, become the DIG's current ones. The check and the write are one
// conditional update, so two concurrent actions cannot both pass.
func (c *Catalog) TransitionDIG(ctx context.Context, key Key, from []string, next StateAction, statusID string) (DIGState, error) {
	return c.Transition(ctx, DIGGroup(key), "the deployment intent group", from, next, statusID)
}

// Transition is TransitionDIG for any lifecycle group; subject names what
// the group is in a refusal ("the deployment intent group is Created; ...").
func (c *Catalog) Transition(ctx context.Context, group, subject string, from []string, next StateAction, statusID string) (DIGState, error) {
	ctx, guarded, err := c.guard(ctx)
	if err != nil {
		return DIGState{}, err
	}
	st, err := c.transition(ctx, group, subject, from, next, statusID)
	return st, guarded(c.storeError(err))
}

func (c *Catalog) transition(ctx context.Context, group, subject string, from []string, next StateAction, statusID string) (DIGState, error) {
	for attempt := 0; attempt < 3; attempt++ {
		cur, exists, err := c.getState(ctx, group)
		if err != nil {
			return cur, err
		}
		if !slices.Contains(from, cur.Current) {
			return cur, errdefs.Conflict("%s is %s; this action needs it to be %s", subject, cur.Current, strings.Join(from, " or "))
		}
		next := next
		if next.Revision == NextRevision {
			next.Revision = cur.LatestRevision(next.ContextID) + 1
		}
		set := bson.D{{Key: "current", Value: next.State}}
		if next.ContextID != "" {
			set = append(set, bson.E{Key: "contextId", Value: next.ContextID})
		}
		if statusID != "" {
			set = append(set, bson.E{Key: "statusContextId", Value: statusID})
		}
		update := bson.D{{Key: "$set", Value: set}, {Key: "$push", Value: bson.D{{Key: "actions", Value: next}}}}
		if next.ContextID != "" && !slices.Contains(cur.Contexts, next.ContextID) {
			update = append(update, bson.E{Key: "$addToSet", Value: bson.D{{Key: "contexts", Value: next.ContextID}}})
		}
		if !exists {
			// First action: create the document (key fields set explicitly,
			// as a FerretDB upsert does not copy them from the filter).
			doc := append(groupFilter(group),
				bson.E{Key: "current", Value: next.State},
				bson.E{Key: "actions", Value: []StateAction{next}},
				bson.E{Key: "contextId", Value: next.ContextID},
				bson.E{Key: "statusContextId", Value: statusID},
				bson.E{Key: "contexts", Value: nonEmpty(next.ContextID)})
			done, err := c.writeState(ctx, group, func() (bool, error) { return inserted(c.digStates().InsertOne(ctx, doc)) })
			if err != nil {
				return cur, fmt.Errorf("write DIG state: %w", err)
			}
			if !done {
				continue // someone else acted first; re-read
			}
			return c.readState(ctx, group)
		}
		filter := append(groupFilter(group), bson.E{Key: "current", Value: cur.Current}, bson.E{Key: "actions", Value: bson.D{{Key: "$size", Value: len(cur.Actions)}}})
		done, err := c.writeState(ctx, group, func() (bool, error) { return matched(c.digStates().UpdateOne(ctx, filter, update)) })
		if err != nil {
			return cur, fmt.Errorf("write DIG state: %w", err)
		}
		if done {
			return c.readState(ctx, group)
		}
	}
	return DIGState{}, errdefs.Conflict("%s changed concurrently; try again", subject)
}

// LockForDelete moves a lifecycle to Deleting when its state is one of
// from (a lifecycle never acted on is Created), in one conditional write:
// from then on every action on it is refused, so no action can start (and
// create runtime state) while its owner is being deleted. UnlockForDelete
// puts the state back, for a delete that did not happen.
func (c *Catalog) LockForDelete(ctx context.Context, group, subject string, from []string) error {
	ctx, guarded, err := c.guard(ctx)
	if err != nil {
		return err
	}
	return guarded(c.storeError(c.lockForDelete(ctx, group, subject, from)))
}

func (c *Catalog) lockForDelete(ctx context.Context, group, subject string, from []string) error {
	for attempt := 0; attempt < 3; attempt++ {
		cur, exists, err := c.getState(ctx, group)
		if err != nil {
			return err
		}
		if !slices.Contains(from, cur.Current) {
			return errdefs.Conflict("%s is %s; it can be deleted when it is %s", subject, cur.Current, strings.Join(from, " or "))
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if !exists {
			doc := append(groupFilter(group), bson.E{Key: "current", Value: StateDeleting}, bson.E{Key: "actions", Value: []StateAction{}},
				bson.E{Key: "contexts", Value: []string{}}, bson.E{Key: "deletingFrom", Value: cur.Current})
			doc = append(doc, c.markerFields(fieldDeleting, fieldDeletingBy, now)...)
			done, err := c.writeState(ctx, group, func() (bool, error) { return inserted(c.digStates().InsertOne(ctx, doc)) })
			if err != nil {
				return fmt.Errorf("lock %s: %w", subject, err)
			}
			if done {
				return nil
			}
			continue
		}
		filter := append(groupFilter(group), bson.E{Key: "current", Value: cur.Current}, bson.E{Key: "actions", Value: bson.D{{Key: "$size", Value: len(cur.Actions)}}})
		set := bson.D{{Key: "$set", Value: append(bson.D{{Key: "current", Value: StateDeleting},
			{Key: "deletingFrom", Value: cur.Current}}, c.markerFields(fieldDeleting, fieldDeletingBy, now)...)}}
		done, err := c.writeState(ctx, group, func() (bool, error) { return matched(c.digStates().UpdateOne(ctx, filter, set)) })
		if err != nil {
			return fmt.Errorf("lock %s: %w", subject, err)
		}
		if done {
			return nil
		}
	}
	return errdefs.Conflict("%s changed concurrently; try again", subject)
}

// UnlockForDelete puts a lifecycle locked by LockForDelete back to its
// state (a lifecycle never acted on goes back to none).
func (c *Catalog) UnlockForDelete(ctx context.Context, group string) error {
	filter := append(groupFilter(group), bson.E{Key: "current", Value: StateDeleting},
		bson.E{Key: "actions", Value: bson.D{{Key: "$size", Value: 0}}}, bson.E{Key: "deletingFrom", Value: StateCreated})
	done, err := c.writeState(ctx, group, func() (bool, error) { return deleted(c.digStates().DeleteOne(ctx, filter)) })
	if err != nil {
		return fmt.Errorf("unlock lifecycle: %w", err)
	}
	if done {
		return nil
	}
	return c.unlock(ctx, group)
}

// unlock puts a lifecycle locked by LockForDelete back to its state.
func (c *Catalog) unlock(ctx context.Context, group string) error {
	var doc struct {
		From string `bson:"deletingFrom"`
	}
	filter := append(groupFilter(group), bson.E{Key: "current", Value: StateDeleting})
	if err := c.digStates().FindOne(ctx, filter).Decode(&doc); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil
		}
		return fmt.Errorf("unlock lifecycle: %w", err)
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "current", Value: doc.From}}},
		{Key: "$unset", Value: bson.D{{Key: "deletingFrom", Value: ""}, {Key: fieldDeleting, Value: ""}, {Key: fieldDeletingBy, Value: ""}}}}
	if _, err := c.writeState(ctx, group, func() (bool, error) { return matched(c.digStates().UpdateOne(ctx, filter, update)) }); err != nil {
		return fmt.Errorf("unlock lifecycle: %w", err)
	}
	return nil
}

// unlockStale puts back the lifecycles a killed process left locked.
func (c *Catalog) unlockStale(ctx context.Context) (int, error) {
	cur, err := c.digStates().Find(ctx, bson.D{{Key: "current", Value: StateDeleting}})
	if err != nil {
		return 0, fmt.Errorf("recover lifecycles: %w", err)
	}
	var docs []struct {
		Group string `bson:"group"`
	}
	for cur.Next(ctx) {
		if _, stale := c.staleDoc(ctx, cur.Current, fieldDeleting, fieldDeletingBy); stale {
			g, _ := cur.Current.Lookup("group").StringValueOK()
			docs = append(docs, struct {
				Group string `bson:"group"`
			}{g})
		}
	}
	_ = cur.Close(context.WithoutCancel(ctx))
	if err := cur.Err(); err != nil {
		return 0, fmt.Errorf("recover lifecycles: %w", err)
	}
	digs := For[bson.Raw](c, DeploymentIntentGroups)
	for _, d := range docs {
		// A DIG deleted before its lifecycle was: the lifecycle goes too,
		// or a DIG created again under its name would inherit its history.
		if g, ok := ParseGroup(d.Group); ok && g.Kind == GroupDIG && c.has(DeploymentIntentGroups) {
			if _, err := digs.Get(ctx, g.Key); errors.Is(err, errdefs.ErrNotFound) {
				if _, err := c.writeState(ctx, d.Group, func() (bool, error) { return deleted(c.digStates().DeleteOne(ctx, groupFilter(d.Group))) }); err != nil {
					return 0, fmt.Errorf("recover lifecycles: %w", err)
				}
				continue
			}
		}
		if err := c.unlock(ctx, d.Group); err != nil {
			return 0, err
		}
	}
	return len(docs), nil
}

// EachState calls f with every lifecycle and its group (a DIG's, a
// logical cloud's, a cluster's network intents'); used at start-up to
// repair what a killed process left.
func (c *Catalog) EachState(ctx context.Context, f func(group string, st DIGState) error) error {
	cur, err := c.digStates().Find(ctx, bson.D{})
	if err != nil {
		return fmt.Errorf("list lifecycles: %w", err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		var st DIGState
		if err := cur.Decode(&st); err != nil {
			return fmt.Errorf("list lifecycles: %w", err)
		}
		group, _ := cur.Current.Lookup("group").StringValueOK()
		if err := f(group, st); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("list lifecycles: %w", err)
	}
	return nil
}

// DeleteDIGState removes a DIG's state with the DIG.
func (c *Catalog) DeleteDIGState(ctx context.Context, key Key) error {
	return c.DeleteState(ctx, DIGGroup(key))
}

// DeleteState removes a lifecycle's state with what it belongs to.
func (c *Catalog) DeleteState(ctx context.Context, group string) error {
	_, err := c.writeState(ctx, group, func() (bool, error) { return deleted(c.digStates().DeleteOne(ctx, groupFilter(group))) })
	return err
}

func (c *Catalog) ensureDIGStateIndex(ctx context.Context) error {
	// One at a time (see ensureIndexes).
	for _, m := range []mongo.IndexModel{
		{Keys: bson.D{{Key: "group", Value: 1}}, Options: options.Index().SetUnique(true).SetName("group")},
		{Keys: bson.D{{Key: "current", Value: 1}}, Options: options.Index().SetName("current")}} {
		if _, err := c.digStates().Indexes().CreateOne(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return []string{}
	}
	return []string{s}
}
