package appcontext

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Cache is an in-memory mirror of every context and cluster state, loaded
// with one range read and then fed by an etcd watch, so status queries cost
// no etcd reads at all. Readers look at it under a read lock through View.
// It keeps no rendered manifest, only each resource's reference to it:
// those are read on demand through Manifests, which bounds what it holds.
type Cache struct {
	store *Store
	log   *logrus.Entry

	mu       sync.RWMutex
	contexts map[string]*builder
	clusters map[ClusterRef]ClusterState
	// clusterGen changes with every cluster state that appears, goes, or
	// changes as ClusterKeyChanged says; starts at 1, so 0 can mean
	// "unknown" to readers.
	clusterGen uint64
	ready      chan struct{}
	once       sync.Once
	// rev is the etcd revision the cache reflects: every change up to it
	// has been applied. revCh is closed (and replaced) when it advances.
	rev   int64
	revCh chan struct{}
	// onChange are told which groups a batch of watch events touched,
	// onScoped also on which clusters.
	onChange []func(groups []string)
	onScoped []func(scopes map[string]Scope)
	// followers keep state of their own from the keys under a prefix.
	followers []follower
}

// Follower keeps state of its own from the etcd keys under a prefix the
// cache's watch brings anyway (the catalogue's index: catalog.Mirror), so
// it needs no watch or read of its own. After a gap in the watch it is
// told what changed meanwhile, deletions included, or, when keys went
// (the cache remembers keys by hash), given all there is (Replace).
type Follower interface {
	// Apply records one key's value or deletion. It runs on the watch
	// goroutine, under the cache's lock, and must not block.
	Apply(key string, value []byte, deleted bool)
	// Replace replaces everything with entries, every key there is under
	// the prefix, at once for the follower's own readers (who do not take
	// the cache's lock). Same goroutine and lock as Apply.
	Replace(entries iter.Seq2[string, []byte])
}

type follower struct {
	prefix string
	f      Follower
}

// Follow has f follow the keys under prefix (within the cache's own
// prefix). Register before Run.
func (c *Cache) Follow(prefix string, f Follower) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followers = append(c.followers, follower{prefix: prefix, f: f})
}

// NewCache returns a cache over store's keys; Run fills and follows it.
// log receives malformed values, which are skipped; nil discards.
func NewCache(store *Store, log *logrus.Entry) *Cache {
	if log == nil {
		log = logrus.NewEntry(logging.Discard())
	}
	return &Cache{store: store, log: log, contexts: map[string]*builder{}, clusters: map[ClusterRef]ClusterState{}, clusterGen: 1, ready: make(chan struct{}),
		revCh: make(chan struct{})}
}

// OnChange registers f to be told, after every batch of changes the watch
// brings, the groups (Meta.Group) whose status answer may have changed: a
// context's own keys, or the state of a cluster it places on. f runs on the
// watch goroutine and must not block. Register before Run.
func (c *Cache) OnChange(f func(groups []string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onChange = append(c.onChange, f)
}

// Scope is what of a group a batch of changes touched: the placements on
// some clusters, or (All) anything, the context's own status included.
type Scope struct {
	All      bool
	Clusters map[ClusterRef]bool
}

// add widens s by one change: on nil means the whole group.
func (s *Scope) add(on *ClusterRef) {
	switch {
	case s.All:
	case on == nil:
		s.All, s.Clusters = true, nil
	default:
		if s.Clusters == nil {
			s.Clusters = map[ClusterRef]bool{}
		}
		s.Clusters[*on] = true
	}
}

// Merge widens s by o.
func (s *Scope) Merge(o Scope) {
	if o.All {
		s.add(nil)
	}
	for c := range o.Clusters {
		s.add(&c)
	}
}

// OnScopedChange is OnChange with, for each group, the clusters whose
// placements changed (or All): a consumer that keeps per-cluster state
// (the history recorder) redoes only those.
func (c *Cache) OnScopedChange(f func(scopes map[string]Scope)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onScoped = append(c.onScoped, f)
}

// Run loads the cache and follows changes until ctx ends (etcdwatch: a
// failed load is retried, and after a gap in the watch what changed
// meanwhile is applied, or, when keys went, everything is loaded again);
// once it had a gap, every group is reported changed, as a reload always
// did.
func (c *Cache) Run(ctx context.Context) error {
	// HashKeys: the follower remembers a hash of each of the fleet's keys,
	// not the key (on every replica); after a gap in which keys went, the
	// cache is handed everything again (Reset).
	f, err := etcdwatch.New(etcdwatch.Options{Client: c.store.cli, Prefixes: []string{c.store.prefix + "/"}, Apply: c.apply,
		Name: "contexts", Logger: c.log, HashKeys: true})
	if err != nil {
		return err
	}
	f.Run(ctx)
	return nil
}

// apply applies one batch of changes and tells the listeners which
// groups it touched.
func (c *Cache) apply(b etcdwatch.Batch) {
	scopes := map[string]Scope{}
	var before []string // a reset's groups before it: gone ones changed too
	c.mu.Lock()
	if b.Reset {
		before = c.groupsLocked()
		c.contexts, c.clusters = map[string]*builder{}, map[ClusterRef]ClusterState{}
		c.clusterGen++
		for _, fl := range c.followers {
			fl.f.Replace(func(yield func(string, []byte) bool) {
				for _, ev := range b.Events {
					if strings.HasPrefix(ev.Key, fl.prefix) && !yield(ev.Key, ev.Value) {
						return
					}
				}
			})
		}
	}
	for _, ev := range b.Events {
		if b.Reset && c.followedLocked(ev.Key) {
			continue // replaced above
		}
		groups, on := c.applyLocked(ev.Key, ev.Value, ev.Deleted)
		for _, g := range groups {
			sc := scopes[g]
			sc.add(on)
			scopes[g] = sc
		}
	}
	c.advanceLocked(b.Revision)
	for _, bl := range c.contexts {
		bl.resolve() // cheap unless a manifest's chunks just arrived
	}
	listeners, scoped := c.onChange, c.onScoped
	c.mu.Unlock()
	switch {
	case b.First:
		c.once.Do(func() { close(c.ready) })
	case b.Listed:
		c.notifyAll(before)
	case len(scopes) > 0:
		list := make([]string, 0, len(scopes))
		for g := range scopes {
			list = append(list, g)
		}
		for _, f := range listeners {
			f(list)
		}
		for _, f := range scoped {
			f(scopes)
		}
	}
}

// followedLocked reports whether a follower takes key.
func (c *Cache) followedLocked(key string) bool {
	for _, fl := range c.followers {
		if strings.HasPrefix(key, fl.prefix) {
			return true
		}
	}
	return false
}

// groupsLocked lists the groups of the contexts the cache has.
func (c *Cache) groupsLocked() []string {
	var out []string
	for _, b := range c.contexts {
		if b.ctx.Meta.Group != "" {
			out = append(out, b.ctx.Meta.Group)
		}
	}
	return out
}

// notifyAll reports every known group changed, and those of also.
func (c *Cache) notifyAll(also []string) {
	c.mu.RLock()
	known := c.groupsLocked()
	listeners, scoped := c.onChange, c.onScoped
	c.mu.RUnlock()
	scopes := make(map[string]Scope, len(known)+len(also))
	for _, g := range append(known, also...) {
		scopes[g] = Scope{All: true}
	}
	list := make([]string, 0, len(scopes))
	for g := range scopes {
		list = append(list, g)
	}
	for _, f := range listeners {
		f(list)
	}
	for _, f := range scoped {
		f(scopes)
	}
}

// advanceLocked records that the cache reflects etcd up to rev.
func (c *Cache) advanceLocked(rev int64) {
	if rev > c.rev {
		c.rev = rev
		close(c.revCh)
		c.revCh = make(chan struct{})
	}
}

// WaitRevision returns once the cache reflects every etcd change up to
// rev (a write's revision: its writer then reads what it wrote), or ctx
// ends. The watch may carry nothing under the cache's prefix for a while,
// so the cache asks etcd for a progress report, which says how far it is.
func (c *Cache) WaitRevision(ctx context.Context, rev int64) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for asked := false; ; {
		c.mu.RLock()
		cur, ch := c.rev, c.revCh
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		if !asked {
			asked = true
			// The cache's watch runs on the stream of contexts that
			// require a leader; a progress request goes to that stream.
			if err := c.store.cli.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
				return fmt.Errorf("cache: request watch progress: %w", err)
			}
		}
		select {
		case <-ch:
		case <-tick.C:
			asked = false
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// applyLocked applies one key and returns the groups it may change, and
// the cluster whose placements alone it changed (nil: it may change
// anything of them).
func (c *Cache) applyLocked(key string, value []byte, deleted bool) ([]string, *ClusterRef) {
	for _, fl := range c.followers {
		if strings.HasPrefix(key, fl.prefix) {
			fl.f.Apply(key, value, deleted)
			return nil, nil
		}
	}
	var on *ClusterRef
	rest := strings.TrimPrefix(key, c.store.prefix+"/")
	kind, tail, _ := strings.Cut(rest, "/")
	var err error
	var id string
	switch kind {
	case "meta":
		id = tail
		if !deleted {
			err = c.builder(tail).applyMeta(value)
		}
	case "status":
		id = tail
		if !deleted {
			err = c.builder(tail).applyStatus(value)
		}
	case "ctx":
		var sub string
		id, sub, _ = strings.Cut(tail, "/")
		err = c.builder(id).applyPlacementKey(sub, value, deleted)
		on = placementCluster(sub)
	case "clusters":
		ref, perr := ParseClusterRef(tail)
		if perr != nil {
			return nil, nil
		}
		old, known := c.clusters[ref]
		if deleted {
			delete(c.clusters, ref)
			if known {
				c.clusterGen++
			}
			return c.groupsOnLocked(ref), &ref
		}
		var st ClusterState
		if err = json.Unmarshal(value, &st); err == nil {
			c.clusters[ref] = st
			if !known || ClusterKeyChanged(old, st) {
				c.clusterGen++
			}
			if !known || visiblyDifferent(old, st) {
				return c.groupsOnLocked(ref), &ref
			}
		}
	}
	if err != nil {
		c.log.WithError(err).WithField("key", key).Warn("skipping a malformed value")
		return nil, nil
	}
	if b := c.contexts[id]; b != nil && b.ctx.Meta.Group != "" {
		return []string{b.ctx.Meta.Group}, on
	}
	return nil, nil
}

// placementCluster is the cluster of a context key under
// app/<app>/cluster/<ref>/…, nil for any other.
func placementCluster(sub string) *ClusterRef {
	if _, ref, _, ok := placementKey(sub); ok {
		return &ref
	}
	return nil
}

// visiblyDifferent reports a cluster state change a status answer shows: a
// renewed Lease alone (LastSeen) is not one.
func visiblyDifferent(a, b ClusterState) bool {
	return a.Connectivity != b.Connectivity || a.Monitor != b.Monitor || a.Reason != b.Reason || a.UnusableReason != b.UnusableReason ||
		!a.UnreachableSince.Equal(b.UnreachableSince)
}

// ClusterKeyChanged reports a change of a cluster's state that status's
// memo would not see without looking the cluster up again: anything but
// Updated, and but LastSeen while both are an agent's cluster whose
// monitor is not Silent (the hub records such a cluster's silence
// itself, so its LastSeen, renewed now and then, shows nowhere). A change
// from one push cluster's state to another does not count: the memo
// looks push clusters up at every pass anyway (their silence depends on
// the time), and their watchers renew LastSeen with every Lease renewal.
func ClusterKeyChanged(a, b ClusterState) bool {
	if !a.Agent && !b.Agent {
		return false
	}
	a.Updated, b.Updated = time.Time{}, time.Time{}
	if a.Agent && b.Agent && a.Monitor != MonitorSilent && b.Monitor != MonitorSilent {
		a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	}
	return a != b
}

// groupsOnLocked lists the groups of the contexts placing on a cluster.
func (c *Cache) groupsOnLocked(ref ClusterRef) []string {
	var out []string
	c.onLocked(ref, func(cx *Context) {
		if cx.Meta.Group != "" {
			out = append(out, cx.Meta.Group)
		}
	})
	return out
}

// onLocked calls f with every context that places anything on a cluster.
func (c *Cache) onLocked(ref ClusterRef, f func(*Context)) {
	for _, b := range c.contexts {
		for _, p := range b.ctx.Placements {
			if p.Cluster == ref {
				f(b.ctx)
				break
			}
		}
	}
}

func (c *Cache) builder(id string) *builder {
	b := c.contexts[id]
	if b == nil {
		b = newLeanBuilder()
		c.contexts[id] = b
	}
	return b
}

// View calls f with the context (nil if unknown) and every cluster's state,
// under the cache's read lock: f must not keep or change them.
func (c *Cache) View(ctx context.Context, id string, f func(*Context, map[ClusterRef]ClusterState)) error {
	return c.ViewGen(ctx, id, func(cx *Context, clusters map[ClusterRef]ClusterState, _ uint64) { f(cx, clusters) })
}

// ViewGen is View with the cluster states' generation: it is the same
// (and never 0) while no cluster state appeared, went, or changed as
// ClusterKeyChanged says.
func (c *Cache) ViewGen(ctx context.Context, id string, f func(*Context, map[ClusterRef]ClusterState, uint64)) error {
	if err := c.WaitLoaded(ctx); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var cx *Context
	if b := c.contexts[id]; b != nil && b.ctx.Meta.ID != "" {
		cx = b.ctx
	}
	f(cx, c.clusters, c.clusterGen)
	return nil
}

// LiveOn lists the contexts not yet Terminated that place anything on the
// cluster, so a cluster still in use is not deleted from under them.
func (c *Cache) LiveOn(ctx context.Context, ref ClusterRef) ([]string, error) {
	if err := c.WaitLoaded(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var ids []string
	c.onLocked(ref, func(cx *Context) {
		if cx.Status.Status != Terminated && cx.Meta.ID != "" {
			ids = append(ids, cx.Meta.ID)
		}
	})
	sort.Strings(ids)
	return ids, nil
}

// Groups lists the groups of every context known, once the cache is
// loaded: what a consumer that keeps state per group catches up on.
func (c *Cache) Groups(ctx context.Context) ([]string, error) {
	if err := c.WaitLoaded(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, b := range c.contexts {
		if g := b.ctx.Meta.Group; g != "" && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Latest is the id of the group's newest context ("" when it has none),
// once the cache is loaded.
func (c *Cache) Latest(ctx context.Context, group string) (string, error) {
	if err := c.WaitLoaded(ctx); err != nil {
		return "", err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var latest *Context
	for _, b := range c.contexts {
		if m := b.ctx.Meta; m.Group == group && m.ID != "" && (latest == nil || m.Created.After(latest.Meta.Created)) {
			latest = b.ctx
		}
	}
	if latest == nil {
		return "", nil
	}
	return latest.Meta.ID, nil
}

// ClusterStates returns a copy of every cluster state the watchers stored,
// once the cache is loaded.
func (c *Cache) ClusterStates(ctx context.Context) (map[ClusterRef]ClusterState, error) {
	if err := c.WaitLoaded(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[ClusterRef]ClusterState, len(c.clusters))
	for ref, st := range c.clusters {
		out[ref] = st
	}
	return out, nil
}

// WaitLoaded returns once the cache holds a complete copy, or ctx ends.
func (c *Cache) WaitLoaded(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
