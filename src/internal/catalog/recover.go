package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// Recovered counts what the start-up repair (Options.RepairBefore) did.
type Recovered struct {
	// Intents are objects whose creation with content never finished.
	Intents int
	// Unmarked are objects a delete had marked but never removed.
	Unmarked int
	// Orphans are contents without their object.
	Orphans int
	// Lifecycles are lifecycles left locked for a delete that never ended.
	Lifecycles int
}

// repair repairs what a process killed mid-write left behind, for every
// kind: creations with content started before before are removed with
// their content (readers never saw them), delete marks set before before are
// cleared (the delete never answered; the object stays), contents without
// an object are removed, and lifecycles locked for a delete go back to their
// state. The orchestrator runs it at start-up with its start time: until
// replicas own work through leases, anything older is nobody's. A write of
// a killed process that lands after this pass is taken over lazily: a
// create meeting such an intent removes it (see takeOver).
func (c *Catalog) repair(ctx context.Context, before time.Time) (Recovered, error) {
	var out Recovered
	before = before.UTC()
	c.mu.Lock()
	c.staleBefore = before
	c.mu.Unlock()
	for _, k := range c.kinds {
		coll := c.db.Collection(k.Collection)
		contents := c.db.Collection(k.Collection + "_content")
		pending, err := c.markedWhere(ctx, k, fieldPending, fieldPendingBy)
		if err != nil {
			return out, err
		}
		for _, m := range pending {
			f := keyFilter(k, m.key)
			// Only that intent: one taken over meanwhile is another's.
			res, err := coll.DeleteOne(ctx, append(f, bson.E{Key: fieldPending, Value: m.since}))
			if err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(m.key), err)
			}
			if res.DeletedCount == 0 {
				continue
			}
			if _, err := contents.DeleteMany(ctx, append(f, bson.E{Key: "gen", Value: m.since})); err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(m.key), err)
			}
			out.Intents++
		}
		deleting, err := c.markedWhere(ctx, k, fieldDeleting, fieldDeletingBy)
		if err != nil {
			return out, err
		}
		for _, m := range deleting {
			res, err := coll.UpdateOne(ctx, append(keyFilter(k, m.key), bson.E{Key: fieldDeleting, Value: m.since}),
				bson.D{{Key: "$unset", Value: bson.D{{Key: fieldDeleting, Value: ""}, {Key: fieldDeletingBy, Value: ""}}}})
			if err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(m.key), err)
			}
			out.Unmarked += int(res.ModifiedCount)
		}
		orphans, err := c.orphanChunks(ctx, k, before)
		if err != nil {
			return out, err
		}
		if len(orphans) > 0 {
			if _, err := contents.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: orphans}}}}); err != nil {
				return out, fmt.Errorf("recover %ss: %w", k.Name, err)
			}
			out.Orphans += len(orphans)
		}
	}
	n, err := c.unlockStale(ctx)
	out.Lifecycles = n
	return out, err
}

// marked is a document's stale marker.
type marked struct {
	key   Key
	since time.Time
}

// markedWhere lists kind's documents whose marker (sinceField, byField)
// is stale (see Owner).
func (c *Catalog) markedWhere(ctx context.Context, k *Kind, sinceField, byField string) ([]marked, error) {
	fields := k.KeyFields()
	proj := bson.D{{Key: sinceField, Value: 1}, {Key: byField, Value: 1}}
	for _, f := range fields {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	cur, err := c.db.Collection(k.Collection).Find(ctx, bson.D{{Key: sinceField, Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(proj))
	if err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var out []marked
	for cur.Next(ctx) {
		if _, stale := c.staleDoc(ctx, cur.Current, sinceField, byField); !stale {
			continue
		}
		key := make(Key, len(fields))
		for i, f := range fields {
			key[i], _ = cur.Current.Lookup(f).StringValueOK()
		}
		since, _ := cur.Current.Lookup(sinceField).TimeOK()
		out = append(out, marked{key: key, since: since})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	return out, nil
}

// orphanChunks lists the content documents of kind that no object points
// at: its object is gone, or names another generation (an interrupted
// replacement), or is pending with another one.
//
// Only generations older than before: a write in flight on another
// replica stores its chunks before its object names them.
func (c *Catalog) orphanChunks(ctx context.Context, k *Kind, before time.Time) ([]any, error) {
	fields := k.KeyFields()
	proj := bson.D{{Key: fieldContentGen, Value: 1}, {Key: fieldPending, Value: 1}}
	for _, f := range fields {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	keyOf := func(doc bson.Raw) string {
		var b strings.Builder
		for _, f := range fields {
			v, _ := doc.Lookup(f).StringValueOK()
			b.WriteString(v)
			b.WriteByte(0)
		}
		return b.String()
	}
	type owner struct{ gen, pending *time.Time }
	owners := map[string]owner{}
	cur, err := c.db.Collection(k.Collection).Find(ctx, bson.D{}, options.Find().SetProjection(proj))
	if err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	for cur.Next(ctx) {
		var o owner
		if t, ok := cur.Current.Lookup(fieldContentGen).TimeOK(); ok {
			o.gen = &t
		}
		if t, ok := cur.Current.Lookup(fieldPending).TimeOK(); ok {
			o.pending = &t
		}
		owners[keyOf(cur.Current)] = o
	}
	_ = cur.Close(ctx)
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	cproj := bson.D{{Key: "_id", Value: 1}, {Key: "gen", Value: 1}}
	for _, f := range fields {
		cproj = append(cproj, bson.E{Key: f, Value: 1})
	}
	cur, err = c.db.Collection(k.Collection+"_content").Find(ctx, bson.D{}, options.Find().SetProjection(cproj))
	if err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var orphans []any
	for cur.Next(ctx) {
		o, ok := owners[keyOf(cur.Current)]
		gen, chunked := cur.Current.Lookup("gen").TimeOK()
		keep := ok && (chunked && (o.gen != nil && o.gen.Equal(gen) || o.pending != nil && o.pending.Equal(gen)) ||
			!chunked && o.gen == nil) || // stored whole, before chunks
			chunked && !gen.Before(before)
		if !keep {
			orphans = append(orphans, cur.Current.Lookup("_id"))
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	return orphans, nil
}
