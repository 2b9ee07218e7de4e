package appcontext

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

func TestCreateGetUpdateList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	id := NewID()
	c1 := ClusterRef{"cp", "c1"}
	res := func(kind, name string) Resource {
		return Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: kind}, Name: name, Namespace: "default",
			Manifest: json.RawMessage(`{"kind":"` + kind + `"}`)}
	}
	meta := Meta{ID: id, Kind: "dig", Group: "p/ca/v1/dig", StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	placements := []*Placement{
		{App: "web", Cluster: c1, Resources: []Resource{res("Namespace", "n"), res("ConfigMap", "b"), res("ConfigMap", "a")}},
		{App: "db", Cluster: c1, Resources: []Resource{res("Service", "s")}},
	}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, placements); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	if err := s.SetResourceStatuses(ctx, id, []StatusUpdate{{App: "web", Cluster: c1, Key: placements[0].Resources[1].Key(), Status: ResourceStatus{Status: RsyncApplied}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx, id, Status{Status: Instantiated}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Group != "p/ca/v1/dig" || got.Status.Status != Instantiated || len(got.Placements) != 2 {
		t.Fatalf("context = %+v", got)
	}
	web := got.Placement("web", c1)
	if web == nil || len(web.Resources) != 3 || web.Resources[0].Name != "n" || web.Resources[2].Name != "a" {
		t.Fatalf("web placement (apply order kept) = %+v", web)
	}
	if st := web.StatusOf("ConfigMap/default/b"); st.Status != RsyncApplied {
		t.Fatalf("status of b = %+v", st)
	}
	if st := web.StatusOf("ConfigMap/default/a"); st.Status != RsyncPending {
		t.Fatalf("status of a = %+v", st)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Meta.ID != id || list[0].Status.Status != Instantiated {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if _, err := s.Get(ctx, "12345"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing context: %v", err)
	}
	// Placed names what Get places, from the keys alone.
	statusID, placed, err := s.Placed(ctx, id)
	if err != nil || statusID != id || fmt.Sprint(placed) != fmt.Sprint(map[ClusterRef]map[string]bool{c1: {"db": true, "web": true}}) {
		t.Fatalf("placed = %q %v, %v", statusID, placed, err)
	}
	if _, _, err := s.Placed(ctx, "12345"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("placed of a missing context: %v", err)
	}
}

func TestIDsAndRefs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if seen[id] || id == "0" || id[0] == '-' {
			t.Fatalf("bad id %q", id)
		}
		seen[id] = true
	}
	ref, err := ParseClusterRef("prov+edge01")
	if err != nil || ref.String() != "prov+edge01" {
		t.Fatalf("ref = %v, %v", ref, err)
	}
	for _, bad := range []string{"x", "+c", "p+", "a+b+c"} {
		if _, err := ParseClusterRef(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseClusterRef(%q) = %v", bad, err)
		}
	}
}

// TestEtcdRequestLimit measures the largest value the embedded etcd
// accepts in one request (its --max-request-bytes, less framing), and
// checks that the Store's chunks and transactions stay well under it.
func TestEtcdRequestLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := env.EtcdPrefix() + "limit"
	lo, hi := 0, 8<<20 // lo fits, hi does not
	for hi-lo > 1024 {
		mid := (lo + hi) / 2
		if _, err := env.Etcd.Client.Put(ctx, key, strings.Repeat("x", mid)); err != nil {
			hi = mid
		} else {
			lo = mid
		}
	}
	t.Logf("largest value etcd accepts in one put: %d bytes (≈ %.2f MiB)", lo, float64(lo)/(1<<20))
	if lo < DefaultMaxRequestBytes-4096 || lo > DefaultMaxRequestBytes {
		t.Fatalf("measured limit %d is not etcd's default %d: adjust DefaultMaxRequestBytes", lo, DefaultMaxRequestBytes)
	}
	lim := newLimits(0)
	if lim.chunk+1024 > lo/2 || lim.txn+maxOps*opOverhead > lo*3/4 {
		t.Fatalf("limits %+v are not a safe fraction of the measured %d", lim, lo)
	}
	// A transaction of the budget's size goes through.
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	b := &batch{s: s}
	for i := range 4 {
		b.put(env.EtcdPrefix()+"t/"+strconv.Itoa(i), []byte(strings.Repeat("y", lim.chunk-100)))
	}
	if err := b.commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// bigConfigMap is a ConfigMap resource whose manifest holds size bytes of data.
func bigConfigMap(name string, size int) Resource {
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name},
		"data": map[string]any{"blob": strings.Repeat(name[:1], size)}}
	data, _ := json.Marshal(obj)
	return Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Namespace: "default", Manifest: data}
}

// An app of 5 MB of manifests, one of them larger than etcd's request
// limit, is stored and read back whole, through Get and through the cache;
// the same manifest on two clusters is stored once.
func TestLargeManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := env.EtcdPrefix()
	s := New(Options{Client: env.Etcd.Client, Prefix: prefix})
	cache := NewCache(s, nil)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cache.Run(cctx) }()
	defer func() { stop(); <-done }()

	var rs []Resource
	for i := range 4 {
		rs = append(rs, bigConfigMap(fmt.Sprintf("c%d", i), 900_000))
	}
	rs = append(rs, bigConfigMap("huge", 2_000_000)) // > 1.5 MiB: chunked
	id := NewID()
	meta := Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	placements := []*Placement{
		{App: "big", Cluster: ClusterRef{"cp", "c1"}, Resources: rs},
		{App: "big", Cluster: ClusterRef{"cp", "c2"}, Resources: rs},
	}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, placements); err != nil {
		t.Fatal(err)
	}
	// What the cache and rsync hold are references, loaded through a
	// cache of 2 MB: the 2 MB manifest is read whenever needed, never kept.
	manifests := NewManifests(s, 2_000_000)
	check := func(how string, c *Context) {
		t.Helper()
		if c == nil || len(c.Placements) != 2 {
			t.Fatalf("%s: context %+v", how, c)
		}
		for _, p := range c.Placements {
			for i, r := range p.Resources {
				if how != "Get" && (len(r.Manifest) > 0 || r.ManifestRef == nil) {
					t.Fatalf("%s holds %s's manifest itself", how, r.Key())
				}
				data, err := manifests.Get(ctx, id, r)
				if err != nil || !bytes.Equal(data, rs[i].Manifest) {
					t.Fatalf("%s: %s on %s: manifest of %d bytes, want %d (%v)", how, r.Key(), p.Cluster, len(data), len(rs[i].Manifest), err)
				}
				if manifests.Size() > 2_000_000 {
					t.Fatalf("the manifest cache holds %d bytes, more than its bound", manifests.Size())
				}
			}
		}
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	check("Get", got)
	lean, err := s.GetWithoutManifests(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	check("GetWithoutManifests", lean)
	chunks := 0 // each manifest once, though placed on two clusters
	for _, r := range rs {
		chunks += (len(r.Manifest) + s.lim.chunk - 1) / s.lim.chunk
	}
	resp, err := env.Etcd.Client.Get(ctx, prefix+"ctx/"+id+"/blob/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != chunks {
		t.Fatalf("blob keys = %d, want %d, %v", len(resp.Kvs), chunks, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		_ = cache.View(ctx, id, func(c *Context, _ map[ClusterRef]ClusterState) {
			ok = c != nil && c.Status.Status == Instantiating
			if ok {
				check("cache", c)
			}
		})
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache never saw the context")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}

	// An update rewrites only new manifests and keeps reading whole.
	rs2 := append([]Resource{bigConfigMap("d0", 10)}, rs...)
	if err := s.Replace(ctx, id, []*Placement{{App: "big", Cluster: ClusterRef{"cp", "c1"}, Resources: rs2}}, nil, Status{Status: Updating}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, id)
	if err != nil || got.Status.Status != Updating || len(got.Placement("big", ClusterRef{"cp", "c1"}).Resources) != 6 {
		t.Fatalf("after replace: %+v %v", got, err)
	}

	// Statuses are written in one batch, with the context's status.
	var ups []StatusUpdate
	for _, r := range rs {
		ups = append(ups, StatusUpdate{App: "big", Cluster: ClusterRef{"cp", "c2"}, Key: r.Key(),
			Status: ResourceStatus{Status: RsyncApplied, Warnings: []string{"w"}}})
	}
	if err := s.SetResourceStatuses(ctx, id, ups, &Status{Status: Updated}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, id)
	p := got.Placement("big", ClusterRef{"cp", "c2"})
	if got.Status.Status != Updated || p.StatusOf("ConfigMap/default/huge").Status != RsyncApplied || p.StatusOf("ConfigMap/default/c0").Warnings[0] != "w" {
		t.Fatalf("statuses: %+v %+v", got.Status, p.Statuses)
	}
}

// WaitRevision gives a writer read-your-writes through the cache: once it
// returns for a write's revision, the cache shows the write; and it
// returns for a revision of a write outside the cache's prefix, which no
// event brings (a progress report does).
func TestCacheWaitRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cache := runCache(t, s)
	for range 20 {
		id := NewID()
		meta := Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Created: time.Now().UTC()}
		if err := s.Create(ctx, meta, Status{Status: Instantiating}, nil); err != nil {
			t.Fatal(err)
		}
		resp, err := env.Etcd.Client.Get(ctx, "x", clientv3.WithCountOnly()) // the store's revision now
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.WaitRevision(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
		seen := false
		_ = cache.View(ctx, id, func(c *Context, _ map[ClusterRef]ClusterState) { seen = c != nil })
		if !seen {
			t.Fatal("the cache reached the write's revision without the write")
		}
	}
	other, err := env.Etcd.Client.Put(ctx, env.EtcdPrefix()+"elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cache.WaitRevision(ctx, other.Header.Revision); err != nil {
		t.Fatal(err)
	}
	t.Logf("caught up with a write outside the prefix in %s", time.Since(start))
}

// runCache runs a cache over s until the test ends.
func runCache(t testing.TB, s *Store) *Cache {
	t.Helper()
	cache := NewCache(s, nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return cache
}

// A batch of changes is reported with what it touched of each group: a
// bundle or a cluster's state names its cluster, the context's status
// the whole group.
func TestScopedChanges(t *testing.T) {
	ctx := context.Background()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cache := NewCache(s, nil)
	got := make(chan map[string]Scope, 16)
	cache.OnScopedChange(func(m map[string]Scope) { got <- m })
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cache.Run(cctx) }()
	defer func() { stop(); <-done }()
	if err := cache.WaitLoaded(ctx); err != nil {
		t.Fatal(err)
	}
	id := NewID()
	g := "dig:p/ca/v1/" + id
	c1, c2 := ClusterRef{"cp", "c1"}, ClusterRef{"cp", "c2"}
	meta := Meta{ID: id, Kind: "dig", Group: g, StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	rs := []Resource{bigConfigMap("cm", 10)}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, []*Placement{{App: "a", Cluster: c1, Resources: rs}, {App: "a", Cluster: c2, Resources: rs}}); err != nil {
		t.Fatal(err)
	}
	// Every event of the creation applied before the bundle is written:
	// one watch response may otherwise carry the creation's last events
	// and the bundle together, a batch that names the whole group.
	head, err := env.Etcd.Client.Get(ctx, "argus-test-revision")
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitRevision(ctx, head.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// wait reads batches until one reports for g the scope want says,
	// skipping what the creation's own batches report.
	wait := func(what string, want func(Scope) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m := <-got:
				if sc, ok := m[g]; ok && want(sc) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: never reported as wanted", what)
			}
		}
	}
	only := func(c ClusterRef) func(Scope) bool {
		return func(sc Scope) bool { return !sc.All && len(sc.Clusters) == 1 && sc.Clusters[c] }
	}
	if err := s.PutBundle(ctx, id, "a", c2, BundleSnapshot{}); err != nil {
		t.Fatal(err)
	}
	wait("a bundle on c2", only(c2))
	if err := s.PutClusterState(ctx, c1, ClusterState{Connectivity: "Unreachable"}); err != nil {
		t.Fatal(err)
	}
	wait("c1's state", only(c1))
	if err := s.SetStatus(ctx, id, Status{Status: Instantiated}); err != nil {
		t.Fatal(err)
	}
	wait("the context's status", func(sc Scope) bool { return sc.All })
}

// A cluster state change counts for status's memo unless only its
// Updated time moved, or LastSeen of an agent's cluster whose monitor is
// not Silent, or it is between two push clusters' states (looked up at
// every pass anyway).
func TestClusterKeyChanged(t *testing.T) {
	now := time.Now().UTC()
	agent := ClusterState{Connectivity: Available, Monitor: MonitorRunning, Agent: true, LastSeen: now, Updated: now}
	push := agent
	push.Agent = false
	silent := agent
	silent.Monitor = MonitorSilent
	later := func(st ClusterState) ClusterState {
		st.LastSeen, st.Updated = now.Add(time.Minute), now.Add(time.Minute)
		return st
	}
	updated := agent
	updated.Updated = now.Add(time.Second)
	for name, c := range map[string]struct {
		a, b ClusterState
		want bool
	}{
		"agent renewed":        {agent, later(agent), false},
		"updated alone":        {agent, updated, false},
		"push renewed":         {push, later(push), false},
		"push unreachable":     {push, ClusterState{Connectivity: Unreachable, Monitor: MonitorRunning, LastSeen: now}, false},
		"silent agent renewed": {silent, later(silent), true},
		"agent went silent":    {agent, silent, true},
		"agent became push":    {agent, push, true},
		"unreachable":          {agent, ClusterState{Connectivity: Unreachable, Monitor: MonitorRunning, Agent: true, LastSeen: now}, true},
	} {
		if got := ClusterKeyChanged(c.a, c.b); got != c.want {
			t.Errorf("%s: %t, want %t", name, got, c.want)
		}
	}
}

// The cache keeps a bundle parsed and indexed, without the raw copy it
// was parsed from and with its lists as long as their entries (every
// placement of a fleet has one); so does GetWithoutManifests, while Get
// keeps the raw status.
func TestCacheKeepsOneCopyOfABundle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cache := runCache(t, s)
	id := NewID()
	c1 := ClusterRef{"cp", "c1"}
	meta := Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, []*Placement{{App: "a", Cluster: c1, Resources: []Resource{bigConfigMap("cm", 10)}}}); err != nil {
		t.Fatal(err)
	}
	// Five ConfigMaps: decoding grows their list past five.
	raw := `{"ready":true,"resourceCount":6,"configMapStatuses":[`
	for i := range 5 {
		raw += fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm%d","namespace":"default","labels":{"a":"b"}},"readyStatus":"Ready"},`, i)
	}
	raw = strings.TrimSuffix(raw, ",") + `],
		"resourceStatuses":[{"group":"example.com","version":"v1","kind":"Widget","name":"w","namespace":"default","object":{},"readyStatus":"Pending","reason":"r"}]}`
	if err := s.PutBundle(ctx, id, "a", c1, BundleSnapshot{ResourceVersion: "7", Status: json.RawMessage(raw), Received: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	// lean: one copy, its lists cut to their length.
	check := func(how string, b *BundleSnapshot, lean bool) {
		t.Helper()
		if b == nil || b.Parsed == nil || len(b.Index) != 6 {
			t.Fatalf("%s: bundle %+v", how, b)
		}
		if (len(b.Status) == 0) != lean {
			t.Errorf("%s: raw status of %d bytes", how, len(b.Status))
		}
		if cms := b.Parsed.ConfigMapStatuses; lean && cap(cms) != len(cms) {
			t.Errorf("%s: %d ConfigMaps in room for %d", how, len(cms), cap(cms))
		}
		cm := b.Index.Get(EntryRef{Kind: "ConfigMap", Namespace: "default", Name: "cm4"})
		w := b.Index.Get(EntryRef{Group: "example.com", Kind: "Widget", Namespace: "default", Name: "w"})
		if cm == nil || cm.Typed != &b.Parsed.ConfigMapStatuses[4] || cm.ReadyStatus != "Ready" ||
			w == nil || w.Custom != &b.Parsed.ResourceStatuses[0] || w.Reason != "r" {
			t.Fatalf("%s: index %+v", how, b.Index)
		}
	}
	// Every write so far is in the cache once it reached this revision.
	resp, err := env.Etcd.Client.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitRevision(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	var b *BundleSnapshot
	if err := cache.View(ctx, id, func(c *Context, _ map[ClusterRef]ClusterState) {
		if p := c.Placement("a", c1); p != nil {
			b = p.Bundle
		}
	}); err != nil {
		t.Fatal(err)
	}
	check("cache", b, true)
	lean, err := s.GetWithoutManifests(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	check("GetWithoutManifests", lean.Placement("a", c1).Bundle, true)
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	check("Get", got.Placement("a", c1).Bundle, false)
}

// eventually polls cond until it holds, for 30 s at most.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s", what)
		}
	}
}

// replaceCounter is a cache follower that counts what it was given.
type replaceCounter struct{ applied, replaced, entries int }

func (r *replaceCounter) Apply(string, []byte, bool) { r.applied++ }
func (r *replaceCounter) Replace(entries iter.Seq2[string, []byte]) {
	r.replaced++
	for range entries {
		r.entries++
	}
}

// A cache whose watch fell behind a compaction while a context and a
// cluster's state were deleted ends up without them (it keeps a hash of
// each key, not the key, so it is handed everything again), tells its
// followers to start over, and reports the deleted context's group changed
// with the rest.
func TestCacheAfterAGapWithDeletions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := env.EtcdPrefix()
	direct := New(Options{Client: env.Etcd.Client, Prefix: prefix})
	cut, proxy := env.EtcdBehindProxy(t)
	cache := NewCache(New(Options{Client: cut, Prefix: prefix}), nil)
	followed := &replaceCounter{}
	cache.Follow(direct.prefix+"/index/", followed)
	var mu sync.Mutex
	changed := map[string]bool{}
	cache.OnChange(func(groups []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range groups {
			changed[g] = true
		}
	})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	ids := []string{NewID(), NewID()}
	for i, id := range ids {
		meta := Meta{ID: id, Kind: "dig", Group: fmt.Sprintf("g/%d", i), StatusID: id, Created: time.Now().UTC()}
		if err := direct.Create(ctx, meta, Status{Status: Instantiated}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c1, c2 := ClusterRef{"cp", "c1"}, ClusterRef{"cp", "c2"}
	for _, c := range []ClusterRef{c1, c2} {
		if err := direct.PutClusterState(ctx, c, ClusterState{Connectivity: Available, Monitor: MonitorRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Etcd.Client.Put(ctx, direct.prefix+"/index/x", "1"); err != nil {
		t.Fatal(err)
	}
	have := func() (groups []string, clusters int) {
		gs, err := cache.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		states, err := cache.ClusterStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return gs, len(states)
	}
	eventually(t, "both contexts, both clusters and the followed key cached", func() bool {
		g, n := have()
		cache.mu.RLock()
		defer cache.mu.RUnlock()
		return len(g) == 2 && n == 2 && followed.applied == 1
	})

	proxy.Cut()
	for _, k := range []string{direct.metaKey(ids[0]), direct.statusKey(ids[0]), direct.ctxPrefix(ids[0])} {
		if _, err := env.Etcd.Client.Delete(ctx, k, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Etcd.Client.Delete(ctx, direct.clusterKey(c1)); err != nil {
		t.Fatal(err)
	}
	if err := direct.PutClusterState(ctx, c2, ClusterState{Connectivity: Unreachable, Monitor: MonitorRunning}); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Etcd.Client.Put(ctx, direct.prefix+"/elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Client.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(changed)
	mu.Unlock()
	proxy.Heal()
	eventually(t, "the deleted context and cluster gone", func() bool {
		g, n := have()
		return len(g) == 1 && g[0] == "g/1" && n == 1
	})
	states, _ := cache.ClusterStates(ctx)
	if states[c2].Connectivity != Unreachable {
		t.Errorf("c2 is %+v, want its state written during the gap", states[c2])
	}
	eventually(t, "both groups reported changed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return changed["g/0"] && changed["g/1"]
	})
	cache.mu.RLock()
	replaced, entries, applied := followed.replaced, followed.entries, followed.applied
	cache.mu.RUnlock()
	if replaced != 1 || entries != 1 || applied != 1 {
		t.Errorf("the follower was replaced %d times with %d keys, and handed %d keys one by one; want its key once each way", replaced, entries, applied)
	}
}
