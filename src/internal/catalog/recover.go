package catalog

import (
	"context"
	"fmt"
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
// replicas own work through leases, anything older is nobody's.
func (c *Catalog) Recover(ctx context.Context, before time.Time) (Recovered, error) {
	var out Recovered
	before = before.UTC()
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
			if _, err := contents.DeleteOne(ctx, f); err != nil {
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
		withContent, err := c.keysWhere(ctx, k, contents.Name(), bson.D{})
		if err != nil {
			return out, err
		}
		for _, key := range withContent {
			n, err := coll.CountDocuments(ctx, keyFilter(k, key), options.Count().SetLimit(1))
			if err != nil {
				return out, fmt.Errorf("recover %s: %w", k.describe(key), err)
			}
			if n == 0 {
				if _, err := contents.DeleteOne(ctx, keyFilter(k, key)); err != nil {
					return out, fmt.Errorf("recover %s: %w", k.describe(key), err)
				}
				out.Orphans++
			}
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
