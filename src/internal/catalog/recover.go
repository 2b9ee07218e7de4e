package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// Recovered counts what Recover repaired.
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

// Recover repairs what a process killed mid-write left behind, for every
// kind: creations with content started before before are removed with
// their content (readers never saw them), delete marks set before before are
// cleared (the delete never answered; the object stays), contents without
// an object are removed, and lifecycles locked for a delete go back to their
// state. The orchestrator runs it at start-up with its start time: until
// replicas own work through leases, anything older is nobody's. A write of
// a killed process that lands after this pass is taken over lazily: a
// create meeting such an intent removes it (see takeOver).
func (c *Catalog) Recover(ctx context.Context, before time.Time) (Recovered, error) {
	var out Recovered
	before = before.UTC()
	c.mu.Lock()
	c.staleBefore = before
	c.mu.Unlock()
	for _, k := range c.kinds {
		coll := c.db.Collection(k.Collection)
		contents := c.db.Collection(k.Collection + "_content")
		stale := bson.D{{Key: fieldPending, Value: bson.D{{Key: "$lt", Value: before}}}}
		keys, err := c.keysWhere(ctx, k, coll.Name(), stale)
		if err != nil {
			return out, err
		}
		for _, key := range keys {
			f := keyFilter(k, key)
			if _, err := coll.DeleteOne(ctx, append(f, stale...)); err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(key), err)
			}
			if _, err := contents.DeleteMany(ctx, f); err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(key), err)
			}
			out.Intents++
		}
		res, err := coll.UpdateMany(ctx, bson.D{{Key: fieldDeleting, Value: bson.D{{Key: "$lt", Value: before}}}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldDeleting, Value: ""}}}})
		if err != nil {
			return out, fmt.Errorf("recover %ss: %w", k.Name, err)
		}
		out.Unmarked += int(res.ModifiedCount)
		orphans, err := c.orphanChunks(ctx, k)
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
	n, err := c.unlockStale(ctx, before)
	out.Lifecycles = n
	return out, err
}

// keysWhere lists the keys of kind's documents in collection matching
// filter, reading the key fields only (contents stay on disk).
func (c *Catalog) keysWhere(ctx context.Context, k *Kind, collection string, filter bson.D) ([]Key, error) {
	fields := k.KeyFields()
	proj := bson.D{}
	for _, f := range fields {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	cur, err := c.db.Collection(collection).Find(ctx, filter, options.Find().SetProjection(proj))
	if err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var keys []Key
	for cur.Next(ctx) {
		key := make(Key, len(fields))
		for i, f := range fields {
			key[i], _ = cur.Current.Lookup(f).StringValueOK()
		}
		keys = append(keys, key)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	return keys, nil
}

// orphanChunks lists the content documents of kind that no object points
// at: its object is gone, or names another generation (an interrupted
// replacement), or is pending with another one.
func (c *Catalog) orphanChunks(ctx context.Context, k *Kind) ([]any, error) {
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
			!chunked && o.gen == nil) // stored whole, before chunks
		if !keep {
			orphans = append(orphans, cur.Current.Lookup("_id"))
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	return orphans, nil
}
