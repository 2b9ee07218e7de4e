package catalog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Limits bound what callers may store, so no caller can fill the stores
// (every object is kept in MongoDB and copied into etcd, whose quota,
// once reached, stops every write). Zero fields are unlimited.
type Limits struct {
	// MaxObjectBytes bounds one object's stored document: its metadata
	// (description, user data) and spec (labels, intents, kv-pairs,
	// override values …) as BSON. Uploaded files are bounded apart.
	MaxObjectBytes int64
	// MaxProjectBytes bounds what one project holds: the documents of
	// every object under it and their uploaded files. Objects outside
	// projects (cluster providers and clusters, controllers, k8splugin's
	// v1 kinds) share one such allowance.
	MaxProjectBytes int64
	// MaxTotalBytes bounds the documents of the whole catalogue, which
	// its index keeps in etcd.
	MaxTotalBytes int64
}

// The documented defaults: an object far above what any EMCO or
// k8splugin client stores, a project room for dozens of charts.
const (
	DefaultMaxObjectBytes  = 256 << 10
	DefaultMaxProjectBytes = 512 << 20
)

// Flags name the limits in refusals, so a caller knows which to ask an
// operator to raise.
const (
	FlagMaxObjectBytes  = "--catalog-max-object-bytes"
	FlagMaxProjectBytes = "--catalog-max-project-bytes"
	FlagMaxTotalBytes   = "--catalog-max-bytes"
)

// SetLimits bounds the writes of callers from now on (Create, Put,
// CreateWithContent, PutContent; Replace, which Argus itself uses to
// record what clusters issued, only by MaxObjectBytes). Project and
// total limits need TrackUsage.
func (c *Catalog) SetLimits(l Limits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limits = l
}

func (c *Catalog) getLimits() Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits
}

// usage is what each project (by name; "" for everything outside
// projects) and the catalogue hold, as the index in etcd says: kept by a
// watch, so every replica sees every replica's writes.
type usage struct {
	mu       sync.Mutex
	ready    bool
	projects map[string]int64 // documents and uploaded files
	total    int64            // documents
}

// entrySize is what an index entry counts for: its document, and the size
// of the uploaded file it names.
func entrySize(doc []byte) (docBytes, contentBytes int64) {
	if len(doc) == 0 {
		return 0, 0
	}
	n, _ := bson.Raw(doc).Lookup(fieldContentSize).AsInt64OK()
	return int64(len(doc)), n
}

func (u *usage) add(project string, doc []byte, sign int64) {
	d, c := entrySize(doc)
	u.projects[project] += sign * (d + c)
	if u.projects[project] == 0 {
		delete(u.projects, project)
	}
	u.total += sign * d
}

// scopeOf is the project an index key's object belongs to ("" outside
// projects), and whether the key is an entry at all.
func (c *Catalog) scopeOf(x *index, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, x.prefix)
	if !ok {
		return "", false
	}
	coll, fields, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	for _, k := range c.kinds {
		if k.Collection == coll {
			return projectOf(k, strings.Split(fields, indexSep)), true
		}
	}
	return "", true
}

// projectOf is the project of an object of kind k at key, "" when the
// kind lives outside projects.
func projectOf(k *Kind, key Key) string {
	root := k
	for root.Parent != nil {
		root = root.Parent
	}
	if root != Projects || len(key) == 0 {
		return ""
	}
	return key[0]
}

// TrackUsage reads what every project holds from the index in etcd under
// prefix (see UseIndex) and returns the function that keeps it current:
// run it until ctx ends; it follows the index with a watch, and starts
// over from a fresh read when the watch breaks or falls behind a
// compaction. It only reads etcd, so it works while etcd is out of space.
func (c *Catalog) TrackUsage(ctx context.Context, cli *clientv3.Client, prefix string) (func(context.Context) error, error) {
	x := newIndex(cli, prefix)
	rev, err := c.loadUsage(ctx, x)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		for attempt := 0; ; {
			err := c.followUsage(ctx, x, rev)
			if ctx.Err() != nil {
				return nil
			}
			attempt++
			if !backoff.Sleep(ctx, min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)) {
				return nil
			}
			if rev, err = c.loadUsage(ctx, x); err == nil {
				attempt = 0
			}
		}
	}, nil
}

// loadUsage sums the index afresh and returns its revision.
func (c *Catalog) loadUsage(ctx context.Context, x *index) (int64, error) {
	resp, err := x.cli.Get(ctx, x.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, errdefs.Unavailable(err, "read the catalogue index")
	}
	u := &usage{projects: map[string]int64{}}
	for _, kv := range resp.Kvs {
		if p, ok := c.scopeOf(x, string(kv.Key)); ok {
			u.add(p, kv.Value, 1)
		}
	}
	c.usage.mu.Lock()
	c.usage.ready, c.usage.projects, c.usage.total = true, u.projects, u.total
	c.usage.mu.Unlock()
	return resp.Header.Revision, nil
}

// followUsage applies the index's changes after rev until the watch ends.
func (c *Catalog) followUsage(ctx context.Context, x *index, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range x.cli.Watch(wctx, x.prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err // compacted past rev, or broken: read afresh
		}
		c.usage.mu.Lock()
		for _, ev := range resp.Events {
			p, ok := c.scopeOf(x, string(ev.Kv.Key))
			if !ok {
				continue
			}
			if ev.PrevKv != nil {
				c.usage.add(p, ev.PrevKv.Value, -1)
			}
			if ev.Type == mvccpb.PUT {
				c.usage.add(p, ev.Kv.Value, 1)
			}
		}
		c.usage.mu.Unlock()
	}
	return ctx.Err()
}

// Usage is what a project (or, for "", everything outside projects)
// holds, and the documents of the whole catalogue; ok is false until
// TrackUsage ran.
func (c *Catalog) Usage(project string) (projectBytes, totalBytes int64, ok bool) {
	c.usage.mu.Lock()
	defer c.usage.mu.Unlock()
	return c.usage.projects[project], c.usage.total, c.usage.ready
}

// checkWrite refuses a write of doc (the object's new document) under key
// that breaks a limit: its size, or the growth of its project and of the
// catalogue past theirs. prev is the object's index entry before the
// write (nil if none); content is the size of the file the write stores
// (-1 when it keeps the object's file).
func (r *Resource[S]) checkWrite(key Key, doc bson.D, prev []byte, content int64) error {
	l := r.cat.getLimits()
	if l == (Limits{}) {
		return nil
	}
	data, err := bson.Marshal(doc)
	if err != nil {
		return fmt.Errorf("size %s: %w", r.kind.describe(key), err)
	}
	if err := r.checkSize(key, int64(len(data)), l); err != nil {
		return err
	}
	return r.checkGrowth(key, int64(len(data)), prev, content, l)
}

// checkObject refuses an object whose document is larger than it may be.
func (r *Resource[S]) checkObject(key Key, doc bson.D) error {
	l := r.cat.getLimits()
	if l.MaxObjectBytes <= 0 {
		return nil
	}
	data, err := bson.Marshal(doc)
	if err != nil {
		return fmt.Errorf("size %s: %w", r.kind.describe(key), err)
	}
	return r.checkSize(key, int64(len(data)), l)
}

func (r *Resource[S]) checkSize(key Key, size int64, l Limits) error {
	if l.MaxObjectBytes > 0 && size > l.MaxObjectBytes {
		return errdefs.TooLarge("%s would store %d bytes; an object may hold at most %d (%s)",
			r.kind.describe(key), size, l.MaxObjectBytes, FlagMaxObjectBytes)
	}
	return nil
}

// checkGrowth refuses a write that takes its project or the catalogue
// past their limits; a write that does not grow them always passes.
func (r *Resource[S]) checkGrowth(key Key, size int64, prev []byte, content int64, l Limits) error {
	if l.MaxProjectBytes <= 0 && l.MaxTotalBytes <= 0 {
		return nil
	}
	project := projectOf(r.kind, key)
	have, total, ok := r.cat.Usage(project)
	if !ok {
		return nil
	}
	oldDoc, oldContent := entrySize(prev)
	if prev != nil && content < 0 {
		content = oldContent
	}
	content = max(content, 0)
	grow := size + content - oldDoc - oldContent
	if l.MaxProjectBytes > 0 && grow > 0 && have+grow > l.MaxProjectBytes {
		what := fmt.Sprintf("project %q", project)
		if project == "" {
			what = "the objects outside projects"
		}
		return errdefs.TooLarge("%s hold %d bytes; storing %s would take them past %d (%s)",
			what, have, r.kind.describe(key), l.MaxProjectBytes, FlagMaxProjectBytes)
	}
	if growDoc := size - oldDoc; l.MaxTotalBytes > 0 && growDoc > 0 && total+growDoc > l.MaxTotalBytes {
		return errdefs.TooLarge("the catalogue holds %d bytes of objects; storing %s would take it past %d (%s)",
			total, r.kind.describe(key), l.MaxTotalBytes, FlagMaxTotalBytes)
	}
	return nil
}
