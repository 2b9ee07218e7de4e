package history

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/status"
)

// scopedSource is a ScopedSource over a world of resources on clusters,
// each cluster's placement ready when all its resources are; it counts
// the whole-group snapshots it was asked for.
type scopedSource struct {
	mu    sync.Mutex
	world map[string]status.ResourceState // by key
	full  int
	asked [][]appcontext.ClusterRef
}

func (s *scopedSource) set(r status.ResourceState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.world[r.Key.String()] = r
}

func (s *scopedSource) Snapshot(ctx context.Context, group string) (status.Snapshot, error) {
	s.mu.Lock()
	s.full++
	s.mu.Unlock()
	return s.of(nil), nil
}

func (s *scopedSource) SnapshotOf(_ context.Context, _ string, clusters []appcontext.ClusterRef) (status.Snapshot, error) {
	s.mu.Lock()
	s.asked = append(s.asked, clusters)
	s.mu.Unlock()
	in := map[string]bool{}
	for _, c := range clusters {
		in[c.Name] = true
	}
	return s.of(in), nil
}

func (s *scopedSource) of(in map[string]bool) status.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := status.Snapshot{Instance: "7", Status: "Instantiated", Placements: map[string]bool{}}
	for _, r := range s.world {
		if in != nil && !in[r.Key.Cluster] {
			continue
		}
		snap.Resources = append(snap.Resources, r)
		pk := status.PlacementKey(r.Key.App, appcontext.ClusterRef{Provider: r.Key.ClusterProvider, Name: r.Key.Cluster})
		ok, seen := snap.Placements[pk]
		snap.Placements[pk] = (ok || !seen) && r.ReadyStatus == "Ready"
	}
	snap.Ready = len(snap.Placements) > 0
	for _, ok := range snap.Placements {
		snap.Ready = snap.Ready && ok
	}
	return snap
}

// A change on one cluster is recorded from that cluster alone: no
// whole-group snapshot, only its cluster's record rewritten, and the
// group's readiness still follows every cluster.
func TestChangeOnOneClusterIsRecordedFromIt(t *testing.T) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &scopedSource{world: map[string]status.ResourceState{}}
	for _, c := range []string{"c0", "c1", "c2"} {
		for i := range 3 {
			src.set(res(key("a", c, "ConfigMap", fmt.Sprint("cm", i)), "Applied", "Present", "Ready", ""))
		}
	}
	const g = "instance:scoped"
	now := t0
	rec := runRecorder(t, RecorderOptions{Store: store, Source: src, Now: func() time.Time { return now },
		Groups: func(context.Context) ([]string, error) { return []string{g}, nil }})
	listAtLeast(t, store, g, 10) // the catch-up: the status and nine resources
	revs := func() map[string]int64 {
		resp, err := env.Etcd.Client.Get(ctx, store.clustersPrefix(g), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range resp.Kvs {
			out[strings.TrimPrefix(string(kv.Key), store.clustersPrefix(g))] = kv.ModRevision
		}
		return out
	}
	before := revs()
	if len(before) != 3 {
		t.Fatalf("cluster records %v, want three", before)
	}
	src.mu.Lock()
	fullBefore := src.full
	src.mu.Unlock()

	c1 := appcontext.ClusterRef{Provider: "cp", Name: "c1"}
	src.set(res(key("a", "c1", "ConfigMap", "cm2"), "Applied", "Present", "NotReady", "gone bad"))
	rec.ChangedScoped(map[string]appcontext.Scope{g: {Clusters: map[appcontext.ClusterRef]bool{c1: true}}})
	l := listAtLeast(t, store, g, 12)
	if d := describe(l[10:]); d != "status:Instantiated/true>Instantiated/false | resource:ConfigMap/cm2 Applied,Present,Ready>Applied,Present,NotReady" {
		t.Fatalf("entries of the change: %s", d)
	}
	after := revs()
	for cl, rev := range before {
		if changed := after[cl] != rev; changed != (cl == "cp+c1") {
			t.Errorf("cluster record %s rewritten = %v, want only cp+c1's", cl, changed)
		}
	}
	// Back to ready: the readiness of the clusters not looked at counts.
	src.set(res(key("a", "c1", "ConfigMap", "cm2"), "Applied", "Present", "Ready", ""))
	rec.ChangedScoped(map[string]appcontext.Scope{g: {Clusters: map[appcontext.ClusterRef]bool{c1: true}}})
	l = listAtLeast(t, store, g, 14)
	if !strings.HasPrefix(describe(l[12:]), "status:Instantiated/false>Instantiated/true | ") {
		t.Fatalf("entries of the recovery: %s", describe(l[12:]))
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.full != fullBefore {
		t.Errorf("%d whole-group snapshots for changes on one cluster", src.full-fullBefore)
	}
	for _, a := range src.asked {
		if len(a) != 1 || a[0] != c1 {
			t.Errorf("asked for %v, want only %v", a, c1)
		}
	}
}

// A cursor an earlier version wrote (every resource inline) is read, and
// the next append moves its resources to cluster records.
func TestEarlierCursorIsMoved(t *testing.T) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	const g = "instance:legacy"
	old := `{"seq":3,"head":true,"instance":"7","status":"Instantiated","ready":true,"resources":{"` + cm.String() + `":{"r":"Applied","c":"Present","y":"Ready"},"` +
		dep.String() + `":{"r":"Applied","c":"Present","y":"Ready"}}}`
	if _, err := env.Etcd.Client.Put(ctx, store.cursorKey(g), old); err != nil {
		t.Fatal(err)
	}
	src := &source{}
	now := t0
	src.set(g, snapshot("Instantiated", false, res(cm, "Applied", "Present", "Ready", ""), res(dep, "Applied", "Present", "NotReady", "")))
	if err := newRecorder(t, store, src, &now).Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	l, _ := store.List(ctx, g, Filter{})
	if d := describe(l); d != "status:Instantiated/true>Instantiated/false | resource:Deployment/sink Applied,Present,Ready>Applied,Present,NotReady" {
		t.Fatalf("entries: %s", d)
	}
	resp, err := env.Etcd.Client.Get(ctx, store.cursorKey(g))
	if err != nil || strings.Contains(string(resp.Kvs[0].Value), "resources") {
		t.Fatalf("the cursor kept its resources inline: %s %v", resp.Kvs, err)
	}
	cur, _, err := store.load(ctx, g)
	got, _ := cur.get(keyCluster(dep), dep.String())
	if err != nil || cur.size() != 2 || got.Ready != "NotReady" || cur.Seq != 5 {
		t.Fatalf("cursor %+v %v", cur, err)
	}
}

// runRecorder runs a recorder until the test ends.
func runRecorder(t *testing.T, opts RecorderOptions) *Recorder {
	t.Helper()
	rec, err := NewRecorder(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return rec
}

// listAtLeast polls until the group has n entries and returns them.
func listAtLeast(t *testing.T, store *Store, g string, n int) []Entry {
	t.Helper()
	waitEntries(t, store, g, n)
	l, err := store.List(context.Background(), g, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A record of some clusters keeps what the group holds back on the
// others: a resource settling on c0 — a ConfigMap rsync applied (its window
// opens at the apply) or a pod (at its first sighting) — is recorded when
// its window closes and the queue brings the group back without a scope,
// though a record of c1 alone came between, itself due then.
func TestScopedRecordKeepsWhatSettlesElsewhere(t *testing.T) {
	for name, c := range map[string]struct {
		settling status.ResourceState
		first    time.Time // of the first record
		want     string
	}{
		"held": {since(res(key("a", "c0", "ConfigMap", "new"), "Applied", "NotPresent", "NotPresent", "not found"), t0),
			t0.Add(100 * time.Millisecond), "resource:ConfigMap/new ->Applied,NotPresent,NotPresent"},
		"sighted": {res(key("a", "c0", "Pod", "p"), "", "Present", "Pending", "containers not ready"),
			t0, "resource:Pod/p ->,Present,Pending"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
			src := &scopedSource{world: map[string]status.ResourceState{}}
			src.set(c.settling)
			src.set(res(key("a", "c1", "ConfigMap", "cm"), "Applied", "Present", "Ready", ""))
			g := "instance:" + name
			now := c.first
			rec := newRecorder(t, store, src, &now)
			due, err := rec.record(ctx, g, &appcontext.Scope{All: true})
			if err != nil || !due.Equal(t0.Add(SettleWindow)) {
				t.Fatalf("the first record: due %v %v, want %v", due, err, t0.Add(SettleWindow))
			}
			// A change on c1, recorded from c1 alone, within c0's window.
			now = t0.Add(500 * time.Millisecond)
			src.set(res(key("a", "c1", "ConfigMap", "cm"), "Applied", "Present", "NotReady", "gone bad"))
			c1 := appcontext.ClusterRef{Provider: "cp", Name: "c1"}
			due, err = rec.record(ctx, g, &appcontext.Scope{Clusters: map[appcontext.ClusterRef]bool{c1: true}})
			if err != nil || !due.Equal(t0.Add(SettleWindow)) {
				t.Errorf("the record of c1: due %v %v, want c0's %v", due, err, t0.Add(SettleWindow))
			}
			// c0's window closes: the queue brings the group back without a scope.
			now = t0.Add(SettleWindow + 10*time.Millisecond)
			if _, err := rec.record(ctx, g, nil); err != nil {
				t.Fatal(err)
			}
			l, err := store.List(ctx, g, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(l); !strings.Contains(d, c.want) {
				t.Fatalf("%s was not recorded when its window closed: %s", c.want, d)
			}
		})
	}
}
