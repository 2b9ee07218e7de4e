package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
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

// setLimits bounds the writes of callers from now on (Create, Put,
// CreateWithContent, PutContent; Replace, which Argus itself uses to
// record what clusters issued, only by MaxObjectBytes). Project and
// total limits need TrackUsage.
func (c *Catalog) setLimits(l Limits) {
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
// follower of the index, so every replica sees every replica's writes.
type usage struct {
	mu       sync.Mutex
	ready    bool
	entries  map[string]entryUsage // index key → what it counts for
	projects map[string]int64      // documents and uploaded files
	total    int64                 // documents
}

// entryUsage is what one index entry counts for, and where.
type entryUsage struct {
	project      string
	doc, content int64
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

// set makes key count for e (the zero entryUsage: nothing).
func (u *usage) set(key string, e entryUsage) {
	old := u.entries[key]
	u.projects[old.project] -= old.doc + old.content
	if u.projects[old.project] == 0 {
		delete(u.projects, old.project)
	}
	u.total -= old.doc
	if e == (entryUsage{}) {
		delete(u.entries, key)
		return
	}
	u.entries[key] = e
	u.projects[e.project] += e.doc + e.content
	u.total += e.doc
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

// TrackUsage returns the function that keeps what every project holds,
// from the catalogue's index in etcd (Options.Index): run it until ctx
// ends; it follows the index (etcdwatch), so it sees every replica's
// writes, and only reads etcd, so it works while etcd is out of space
// (and the index waits for Reindex). Project and total limits apply once
// it read the index a first time.
func (c *Catalog) TrackUsage() (func(context.Context) error, error) {
	c.mu.Lock()
	x := c.indexAt
	c.mu.Unlock()
	if x == nil {
		return nil, errors.New("catalog: usage is tracked in the index, and the catalogue has none")
	}
	f, err := etcdwatch.New(etcdwatch.Options{Client: x.cli, Prefixes: []string{x.prefix}, Name: "catalogue usage",
		Apply: func(b etcdwatch.Batch) { c.applyUsage(x, b) }})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		f.Run(ctx)
		return nil
	}, nil
}

func (c *Catalog) applyUsage(x *index, b etcdwatch.Batch) {
	c.usage.mu.Lock()
	defer c.usage.mu.Unlock()
	if c.usage.entries == nil {
		c.usage.entries, c.usage.projects = map[string]entryUsage{}, map[string]int64{}
	}
	for _, ev := range b.Events {
		p, ok := c.scopeOf(x, ev.Key)
		if !ok {
			continue
		}
		e := entryUsage{}
		if !ev.Deleted {
			d, n := entrySize(ev.Value)
			e = entryUsage{project: p, doc: d, content: n}
		}
		c.usage.set(ev.Key, e)
	}
	if b.Listed {
		c.usage.ready = true
	}
}

// noteUsage counts an index entry this catalogue just wrote (nil: removed)
// at once, so its next write is checked against it; the follower sees the
// same value when the change comes round.
func (c *Catalog) noteUsage(ek string, k *Kind, key Key, doc []byte) {
	c.usage.mu.Lock()
	defer c.usage.mu.Unlock()
	if c.usage.entries == nil {
		return // not tracked
	}
	e := entryUsage{}
	if doc != nil {
		d, n := entrySize(doc)
		e = entryUsage{project: projectOf(k, key), doc: d, content: n}
	}
	c.usage.set(ek, e)
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
