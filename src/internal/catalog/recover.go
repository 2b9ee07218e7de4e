package catalog

import (
	"context"
	"fmt"
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
	// Orphans are contents without their object. Always 0: start-up reads
	// no content (a write cut short leaves an intent in etcd instead,
	// which RunRepairs repairs; see intent).
	Orphans int
	// Lifecycles are lifecycles left locked for a delete that never ended.
	Lifecycles int
}

// repair repairs what a process killed mid-write left behind, for every
// kind: creations with content started before before are removed with
// their content (readers never saw them), delete marks set before before are
// cleared (the delete never answered; the object stays), and lifecycles
// locked for a delete go back to their state. The orchestrator runs it at start-up with its start time: until
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
			if err := c.dropChunks(ctx, k, m.key, m.since, m.chunks); err != nil {
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
	}
	n, err := c.unlockStale(ctx)
	out.Lifecycles = n
	return out, err
}

// marked is a document's stale marker (and, for an intent, the chunk
// count of the content it was inserted with; -1 when unknown).
type marked struct {
	key    Key
	since  time.Time
	chunks int
}

// markedWhere lists kind's documents whose marker (sinceField, byField)
// is stale (see Owner).
func (c *Catalog) markedWhere(ctx context.Context, k *Kind, sinceField, byField string) ([]marked, error) {
	fields := k.KeyFields()
	proj := bson.D{{Key: sinceField, Value: 1}, {Key: byField, Value: 1}, {Key: fieldContentChunks, Value: 1}}
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
		out = append(out, marked{key: key, since: since, chunks: pendingChunks(cur.Current)})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("recover %ss: %w", k.Name, err)
	}
	return out, nil
}
