package catalog

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

// With several orchestrator replicas on one catalogue, a marker (a
// write-ahead intent, a delete mark, a lifecycle locked for a delete) may
// belong to a request still running on another replica: a replica that
// starts must not clear it, and one left by a replica that died must not
// block its object for long. So each marker records who set it — the
// replica's id and the etcd lease it holds — and is stale once that lease
// is gone (the replica died, and its lease expired or was revoked), or
// when the replica's own id set it under another lease (the process that
// ran before this one under the same id; ids are unique among live
// replicas). A marker without an owner (set by an older release, or
// before a replica registered) is stale once older than the last
// start-up repair's point, as before.
const (
	fieldPendingBy  = "pendingBy"
	fieldDeletingBy = "deletingBy"
)

// Owner identifies this process's markers and tells whether another
// process's are still live.
type Owner struct {
	// ID is this replica's id.
	ID string
	// Lease is the etcd lease this replica holds now; 0 while it holds none.
	Lease func() int64
	// Alive reports whether a lease is still held.
	Alive func(ctx context.Context, lease int64) (bool, error)
}

// setOwner makes the catalogue sign its markers as o's and judge others'
// by their lease (see Owner).
func (c *Catalog) setOwner(o Owner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owner = &o
}

// by is what this process's markers record: "<id>/<lease hex>"; "" when
// no owner is set.
func (c *Catalog) by() string {
	c.mu.Lock()
	o := c.owner
	c.mu.Unlock()
	if o == nil {
		return ""
	}
	return o.ID + "/" + strconv.FormatInt(o.Lease(), 16)
}

// staleMark reports whether a marker set at since by by belongs to no live
// process (see Owner).
func (c *Catalog) staleMark(ctx context.Context, since time.Time, by string) bool {
	c.mu.Lock()
	o, before := c.owner, c.staleBefore
	c.mu.Unlock()
	id, leaseHex, owned := strings.Cut(by, "/")
	lease, err := strconv.ParseInt(leaseHex, 16, 64)
	if !owned || err != nil || o == nil || lease == 0 {
		return !before.IsZero() && since.Before(before)
	}
	if id == o.ID {
		return lease != o.Lease() // this id's process before this one
	}
	alive, err := o.Alive(ctx, lease)
	if err != nil {
		return false // cannot tell: the safe side keeps it
	}
	return !alive
}

// staleDoc reports whether a document's marker (its since and by fields)
// is stale; false when it has none.
func (c *Catalog) staleDoc(ctx context.Context, doc bson.Raw, sinceField, byField string) (marked, stale bool) {
	since, ok := doc.Lookup(sinceField).TimeOK()
	if !ok {
		return false, false
	}
	by, _ := doc.Lookup(byField).StringValueOK()
	return true, c.staleMark(ctx, since, by)
}

// markerFields are a new marker: when and by whom.
func (c *Catalog) markerFields(sinceField, byField string, since time.Time) bson.D {
	d := bson.D{{Key: sinceField, Value: since}}
	if by := c.by(); by != "" {
		d = append(d, bson.E{Key: byField, Value: by})
	}
	return d
}
