package history

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func key(app, cluster, kind, name string) status.ResourceKey {
	return status.ResourceKey{App: app, ClusterProvider: "cp", Cluster: cluster, Version: "v1", Kind: kind, Namespace: "default", Name: name}
}

func res(k status.ResourceKey, rsync, cluster, ready, reason string) status.ResourceState {
	return status.ResourceState{Key: k, RsyncStatus: rsync, ClusterStatus: cluster, ReadyStatus: ready, Reason: reason}
}

var (
	cm  = key("sink", "edge1", "ConfigMap", "sink-configmap")
	dep = key("sink", "edge1", "Deployment", "sink")
)

// describe renders entries compactly for table comparisons.
func describe(l []Entry) string {
	var out []string
	for _, e := range l {
		s := e.Kind + ":"
		switch e.Kind {
		case KindAction:
			s += e.From.State + ">" + e.To.State
		case KindStatus:
			if e.From != nil {
				s += fmt.Sprintf("%s/%v", e.From.Status, *e.From.Ready)
			}
			s += fmt.Sprintf(">%s/%v", e.To.Status, *e.To.Ready)
		case KindResource:
			s += e.Resource.GVK.Kind + "/" + e.Resource.Name + " "
			side := func(st *State) string {
				if st == nil {
					return "-"
				}
				return st.RsyncStatus + "," + st.ClusterStatus + "," + st.ReadyStatus
			}
			s += side(e.From) + ">" + side(e.To)
		}
		out = append(out, s)
	}
	return strings.Join(out, " | ")
}

func TestDiff(t *testing.T) {
	approve := catalog.StateAction{State: "Approved", TimeStamp: t0}
	inst := catalog.StateAction{State: "Instantiated", ContextID: "7", TimeStamp: t0.Add(time.Second)}
	start := status.Snapshot{Actions: []catalog.StateAction{approve, inst}, Instance: "7", Status: "Instantiating",
		Resources: []status.ResourceState{res(dep, "Pending", "Unknown", "Unknown", "no bundle"), res(cm, "Pending", "Unknown", "Unknown", "no bundle")}}
	var started cursor
	for _, e := range diff(cursor{}, start, t0) {
		started.apply(&e)
	}
	ready := status.Snapshot{Actions: start.Actions, Instance: "7", Status: "Instantiated", Ready: true,
		Resources: []status.ResourceState{res(dep, "Applied", "Present", "Ready", ""), res(cm, "Applied", "Present", "Ready", "")}}
	var readyCur cursor
	for _, e := range diff(cursor{}, ready, t0) {
		readyCur.apply(&e)
	}
	cases := map[string]struct {
		from cursor
		snap status.Snapshot
		want string
	}{
		"nothing yet": {cursor{}, status.Snapshot{}, ""},
		"approved only": {cursor{}, status.Snapshot{Actions: []catalog.StateAction{approve}},
			"action:Created>Approved"},
		"first sight: actions, status, every resource in key order": {cursor{}, start,
			"action:Created>Approved | action:Approved>Instantiated | status:>Instantiating/false | " +
				"resource:ConfigMap/sink-configmap ->Pending,Unknown,Unknown | resource:Deployment/sink ->Pending,Unknown,Unknown"},
		"the same again: nothing": {started, start, ""},
		"applied and ready": {started, ready,
			"status:Instantiating/false>Instantiated/true | " +
				"resource:ConfigMap/sink-configmap Pending,Unknown,Unknown>Applied,Present,Ready | resource:Deployment/sink Pending,Unknown,Unknown>Applied,Present,Ready"},
		"a reason alone is no transition": {readyCur, withReason(ready, "something"), ""},
		"configmap deleted in the cluster": {readyCur, status.Snapshot{Actions: ready.Actions, Instance: "7", Status: "Instantiated",
			Resources: []status.ResourceState{res(dep, "Applied", "Present", "Ready", ""), res(cm, "Applied", "NotPresent", "NotPresent", "not found in the cluster")}},
			"status:Instantiated/true>Instantiated/false | resource:ConfigMap/sink-configmap Applied,Present,Ready>Applied,NotPresent,NotPresent"},
		"a resource no longer reported": {readyCur, status.Snapshot{Actions: ready.Actions, Instance: "7", Status: "Instantiated", Ready: true,
			Resources: []status.ResourceState{res(dep, "Applied", "Present", "Ready", "")}},
			"resource:ConfigMap/sink-configmap Applied,Present,Ready>-"},
		"a new action": {readyCur, status.Snapshot{Actions: append(append([]catalog.StateAction{}, ready.Actions...),
			catalog.StateAction{State: "Terminated", ContextID: "7", TimeStamp: t0.Add(time.Minute)}), Instance: "7", Status: "Terminating",
			Resources: ready.Resources},
			"action:Instantiated>Terminated | status:Instantiated/true>Terminating/false"},
		"a new instance is a status change": {readyCur, status.Snapshot{Actions: ready.Actions, Instance: "8", Status: "Instantiated", Ready: true,
			Resources: ready.Resources}, "status:Instantiated/true>Instantiated/true"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := diff(c.from, c.snap, t0.Add(time.Hour))
			if d := describe(got); d != c.want {
				t.Fatalf("got  %s\nwant %s", d, c.want)
			}
			for _, e := range got {
				if e.Kind != KindAction && !e.Time.Equal(t0.Add(time.Hour)) {
					t.Errorf("%s entry at %s, want the time it was seen", e.Kind, e.Time)
				}
			}
		})
	}
	// An action keeps its own time; a deleted ConfigMap's entry its reason.
	got := diff(cursor{}, start, t0.Add(time.Hour))
	if !got[0].Time.Equal(t0) || got[1].Instance != "7" {
		t.Fatalf("action entries %+v", got[:2])
	}
	got = diff(readyCur, status.Snapshot{Actions: ready.Actions, Instance: "7", Status: "Instantiated",
		Resources: []status.ResourceState{res(cm, "Applied", "NotPresent", "NotPresent", "not found in the cluster"), res(dep, "Applied", "Present", "Ready", "")}}, t0)
	last := got[len(got)-1]
	if last.Reason != "not found in the cluster" || *last.To.Ready || !*last.From.Ready || last.App != "sink" || last.Cluster != "edge1" {
		t.Fatalf("entry %+v from %+v to %+v", last, last.From, last.To)
	}
}

func withReason(s status.Snapshot, reason string) status.Snapshot {
	s.Resources = append([]status.ResourceState{}, s.Resources...)
	for i := range s.Resources {
		s.Resources[i].Reason = reason
	}
	return s
}

// source is a Source whose snapshots a test sets.
type source struct {
	mu    sync.Mutex
	snaps map[string]status.Snapshot
}

func (s *source) set(group string, snap status.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snaps == nil {
		s.snaps = map[string]status.Snapshot{}
	}
	s.snaps[group] = snap
}

func (s *source) Snapshot(_ context.Context, group string) (status.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.snaps[group]
	if !ok {
		return status.Snapshot{}, errdefs.NotFound("no %s", group)
	}
	return snap, nil
}

func newRecorder(t *testing.T, store *Store, src Source, now *time.Time) *Recorder {
	t.Helper()
	r, err := NewRecorder(RecorderOptions{Store: store, Source: src, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func snapshot(status_ string, ready bool, rs ...status.ResourceState) status.Snapshot {
	return status.Snapshot{Instance: "7", Status: status_, Ready: ready, Resources: rs}
}

func TestRecorderRecordsOnceAndSurvivesRestarts(t *testing.T) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &source{}
	now := t0
	const g = "dig:p/ca/v1/dig"
	rec := newRecorder(t, store, src, &now)
	src.set(g, snapshot("Instantiated", true, res(cm, "Applied", "Present", "Ready", "")))
	for range 3 { // three notifications of one change: one set of entries
		if err := rec.Record(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	all, err := store.List(ctx, g, Filter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("after one change recorded thrice: %s %v", describe(all), err)
	}

	// A restarted recorder (or another replica) derives from the cursor.
	now = t0.Add(time.Minute)
	src.set(g, snapshot("Instantiated", false, res(cm, "Applied", "NotPresent", "NotPresent", "not found in the cluster")))
	rec2 := newRecorder(t, store, src, &now)
	for range 2 {
		if err := rec2.Record(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	f, err := ParseFilter(url.Values{"resource": {"sink-configmap"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.List(ctx, g, f)
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(got); d != "resource:ConfigMap/sink-configmap ->Applied,Present,Ready | resource:ConfigMap/sink-configmap Applied,Present,Ready>Applied,NotPresent,NotPresent" {
		t.Fatalf("resource history: %s", d)
	}
	if got[0].Seq >= got[1].Seq || got[1].Time.Before(got[0].Time) || got[1].Reason != "not found in the cluster" {
		t.Fatalf("not in time order: %+v", got)
	}
	// Filters: since, app, cluster, kind/name; status entries only unfiltered.
	for q, want := range map[string]int{"": 4, "since=" + t0.Add(30*time.Second).Format(time.RFC3339): 2, "app=sink": 2, "app=other": 0,
		"cluster=cp%2Bedge1": 2, "cluster=cp+edge2": 0, "resource=ConfigMap/sink-configmap": 2, "resource=Deployment/sink-configmap": 0} {
		v, _ := url.ParseQuery(q)
		f, err := ParseFilter(v)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if l, _ := store.List(ctx, g, f); len(l) != want {
			t.Errorf("%q: %d entries, want %d: %s", q, len(l), want, describe(l))
		}
	}
	for _, bad := range []string{"since=yesterday", "cluster=nocluster"} {
		v, _ := url.ParseQuery(bad)
		if _, err := ParseFilter(v); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", bad, err)
		}
	}

	// The subject deleted: its history goes.
	src.mu.Lock()
	delete(src.snaps, g)
	src.mu.Unlock()
	if err := rec2.Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	if l, _ := store.List(ctx, g, Filter{}); len(l) != 0 {
		t.Fatalf("history of a deleted subject: %s", describe(l))
	}
}

// Two recorders of one group (a hand-over between replicas) never write an
// entry twice: the loser of the cursor race re-diffs against the winner.
func TestConcurrentRecordersWriteOnce(t *testing.T) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &source{}
	now := t0
	const g = "instance:42"
	var rs []status.ResourceState
	for i := range 30 {
		rs = append(rs, res(key("a", "c", "ConfigMap", fmt.Sprintf("cm%02d", i)), "Applied", "Present", "Ready", ""))
	}
	src.set(g, snapshot("Instantiated", true, rs...))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- newRecorder(t, store, src, &now).Record(ctx, g)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, _ := store.List(ctx, g, Filter{})
	if len(l) != 31 {
		t.Fatalf("%d entries, want 31 (one status, 30 resources)", len(l))
	}
	seen := map[int64]bool{}
	for _, e := range l {
		if seen[e.Seq] {
			t.Fatalf("seq %d twice", e.Seq)
		}
		seen[e.Seq] = true
	}
}

// A change larger than one transaction is written in guarded chunks, and
// only the newest Limit entries are kept.
func TestChunksAndLimit(t *testing.T) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix(), Limit: 150})
	src := &source{}
	now := t0
	const g = "instance:43"
	rec := newRecorder(t, store, src, &now)
	var rs []status.ResourceState
	for i := range 250 {
		r := res(key("a", "c", "ConfigMap", fmt.Sprintf("cm%03d", i)), "Pending", "Unknown", "Unknown", "")
		r.Since = t0.Add(-time.Minute) // queued long ago: nothing settles (settle.go)
		rs = append(rs, r)
	}
	src.set(g, snapshot("Instantiating", false, rs...))
	before, err := env.Etcd.Client.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	// The 101 entries the limit drops at once were never written.
	if puts := entryPuts(t, store, g, before.Header.Revision); puts != 150 {
		t.Fatalf("%d entries written for the newest 150 of 251", puts)
	}
	l, _ := store.List(ctx, g, Filter{})
	if len(l) != 150 || l[0].Seq != 102 || l[149].Seq != 251 {
		t.Fatalf("%d entries, seq %d..%d; want the newest 150 of 251", len(l), l[0].Seq, l[len(l)-1].Seq)
	}
	cur, _, err := store.load(ctx, g)
	if err != nil || cur.Seq != 251 || cur.size() != 250 {
		t.Fatalf("cursor seq %d with %d resources, %v", cur.Seq, cur.size(), err)
	}
	if err := rec.Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	if l2, _ := store.List(ctx, g, Filter{}); l2[len(l2)-1].Seq != 251 {
		t.Fatal("recording an unchanged group appended")
	}
	if cur.Trimmed != 101 {
		t.Fatalf("the cursor says it trimmed up to %d, want 101", cur.Trimmed)
	}
	// A smaller limit (a restart with another one) trims from the last
	// trim on, so nothing older stays behind.
	small := &Store{cli: store.cli, prefix: store.prefix, limit: 100}
	for i := range rs {
		rs[i].RsyncStatus, rs[i].ClusterStatus, rs[i].ReadyStatus = "Applied", "Present", "Ready"
	}
	src.set(g, snapshot("Instantiating", false, rs...))
	if err := newRecorder(t, small, src, &now).Record(ctx, g); err != nil {
		t.Fatal(err)
	}
	if l, _ := store.List(ctx, g, Filter{}); len(l) != 100 || l[99].Seq != 501 {
		t.Fatalf("%d entries after a smaller limit, the last %d; want the newest 100 of 501", len(l), l[len(l)-1].Seq)
	}
}

// entryPuts counts the entries of group written after etcd revision rev.
func entryPuts(t *testing.T, store *Store, group string, rev int64) int {
	t.Helper()
	now, err := env.Etcd.Client.Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	puts := 0
	// The group's last write (its cursor) is at now's revision or before.
	last := int64(0)
	for resp := range env.Etcd.Client.Watch(ctx, store.groupPrefix(group), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut && strings.HasPrefix(string(ev.Kv.Key), store.entriesPrefix(group)) {
				puts++
			}
			last = ev.Kv.ModRevision
		}
		if last >= now.Header.Revision || resp.Err() != nil {
			break
		}
		if r, err := env.Etcd.Client.Get(ctx, store.cursorKey(group)); err == nil && len(r.Kvs) > 0 && last >= r.Kvs[0].ModRevision {
			break
		}
	}
	return puts
}

// Run catches up on every group at start, follows Changed, honours the
// Owner, and Follow sees what is appended.
func TestRunFollowAndOwnership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &source{}
	src.set("dig:p/ca/v1/a", snapshot("Instantiated", true, res(cm, "Applied", "Present", "Ready", "")))
	src.set("dig:p/ca/v1/b", snapshot("Instantiated", true, res(cm, "Applied", "Present", "Ready", "")))
	rec, err := NewRecorder(RecorderOptions{Store: store, Source: src, Owner: ownerFunc(func(g string) bool { return g != "dig:p/ca/v1/b" }),
		Groups: func(context.Context) ([]string, error) {
			return []string{"dig:p/ca/v1/a", "dig:p/ca/v1/b", "cluster:cp+c1"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ParseFilter(url.Values{"resource": {"ConfigMap/sink-configmap"}})
	follow := store.Follow(ctx, "dig:p/ca/v1/a", f)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitEntries(t, store, "dig:p/ca/v1/a", 2)
	src.set("dig:p/ca/v1/a", snapshot("Instantiated", false, res(cm, "Applied", "NotPresent", "NotPresent", "not found in the cluster")))
	rec.Changed([]string{"dig:p/ca/v1/a", "dig:p/ca/v1/b", "lc:p/x"})
	waitEntries(t, store, "dig:p/ca/v1/a", 4)
	if l, _ := store.List(ctx, "dig:p/ca/v1/b", Filter{}); len(l) != 0 {
		t.Fatalf("a group owned elsewhere was recorded: %s", describe(l))
	}
	var followed []Entry
	for len(followed) < 2 {
		select {
		case resp, ok := <-follow.C():
			if !ok {
				t.Fatal("follow ended")
			}
			l, err := follow.Entries(resp)
			if err != nil {
				t.Fatal(err)
			}
			followed = append(followed, l...)
		case <-ctx.Done():
			t.Fatalf("followed only %s", describe(followed))
		}
	}
	if followed[1].To.ClusterStatus != "NotPresent" || followed[0].From != nil {
		t.Fatalf("followed %s", describe(followed))
	}
}

type ownerFunc func(string) bool

func (f ownerFunc) Owns(g string) bool { return f(g) }

func waitEntries(t *testing.T, store *Store, g string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := store.List(context.Background(), g, Filter{})
		if err == nil && len(l) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d entries after 30s, want %d (%v)", g, len(l), n, err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// BenchmarkRecordOneChangeIn1000: recording one resource's transition in a
// group of 1,000 resources (the diff, one entry and the cursor in one etcd
// transaction), the recorder's cost per change besides the status answer.
func BenchmarkRecordOneChangeIn1000(b *testing.B) {
	ctx := context.Background()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &source{}
	now := t0
	const g = "instance:bench"
	rs := make([]status.ResourceState, 1000)
	for i := range rs {
		rs[i] = res(key("a", "c", "Pod", fmt.Sprintf("pod%04d", i)), "", "Present", "Ready", "")
	}
	src.set(g, snapshot("Instantiated", true, rs...))
	rec, err := NewRecorder(RecorderOptions{Store: store, Source: src, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	if err := rec.Record(ctx, g); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		next := append([]status.ResourceState{}, rs...)
		if i%2 == 0 {
			next[i%1000].ReadyStatus = "Pending"
		}
		src.set(g, snapshot("Instantiated", i%2 == 1, next...))
		if err := rec.Record(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDiffRecordsSyncHealsAndAdoptions(t *testing.T) {
	synced := res(cm, "Applied", "Present", "Ready", "")
	synced.SyncStatus = "Synced"
	var cur cursor
	for _, e := range diff(cursor{}, snapshot("Instantiated", true, synced), t0) {
		cur.apply(&e)
	}
	missing := res(cm, "Applied", "NotPresent", "NotPresent", "not found in the cluster")
	missing.SyncStatus = "Missing"
	got := diff(cur, snapshot("Instantiated", false, missing), t0.Add(time.Minute))
	if len(got) != 2 || got[1].Kind != KindResource || got[1].From.SyncStatus != "Synced" || got[1].To.SyncStatus != "Missing" {
		t.Fatalf("Synced to Missing: %+v", got)
	}
	for _, e := range got {
		cur.apply(&e)
	}
	healed := synced
	healed.Heal = &status.Heal{Count: 1, By: "sync", Was: "Missing", Streak: 1}
	healed.AdoptedFrom = "no Argus deployment (written by kubectl-create)"
	got = diff(cur, snapshot("Instantiated", true, healed), t0.Add(2*time.Minute))
	kinds := []string{}
	for _, e := range got {
		kinds = append(kinds, e.Kind)
		cur.apply(&e)
	}
	if strings.Join(kinds, ",") != "status,resource,adopt,heal" {
		t.Fatalf("after a heal: %v", kinds)
	}
	heal := got[3]
	if heal.By != "sync" || heal.Heals != 1 || heal.Reason != "re-applied by sync: it was Missing" || heal.Resource.Name != "sink-configmap" {
		t.Fatalf("heal entry: %+v", heal)
	}
	if got[2].AdoptedFrom != healed.AdoptedFrom || !strings.Contains(got[2].Reason, "kubectl-create") {
		t.Fatalf("adopt entry: %+v", got[2])
	}
	// Recorded once: the same state again is nothing new.
	if again := diff(cur, snapshot("Instantiated", true, healed), t0.Add(3*time.Minute)); len(again) != 0 {
		t.Fatalf("recorded twice: %+v", again)
	}
	healed.Heal = &status.Heal{Count: 4, By: "self-heal", Was: "OutOfSync", Streak: status.FlappingStreak}
	got = diff(cur, snapshot("Instantiated", true, healed), t0.Add(4*time.Minute))
	if len(got) != 1 || got[0].Kind != KindHeal || !strings.Contains(got[0].Reason, "keeps undoing it") {
		t.Fatalf("a heal undone again and again: %+v", got)
	}
}

// TestCursorCloneIsCopyOnWrite: a clone's writes (append's next cursor,
// before its transaction commits) never show in the cursor it came from,
// and keyCluster files a key where clusterOf does.
func TestCursorCloneIsCopyOnWrite(t *testing.T) {
	a := status.ResourceKey{App: "app", ClusterProvider: "cp", Cluster: "c1", Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	b := a
	b.Cluster, b.Name = "c2", "b"
	var c cursor
	c.put(a.String(), resState{Ready: "Ready"}, false)
	c.put(b.String(), resState{Ready: "Ready"}, false)
	next := c.clone()
	next.put(a.String(), resState{Ready: "NotReady"}, false)
	next.put(b.String(), resState{}, true)
	next.put(b.String(), resState{Ready: "Ready"}, false) // its cluster's map went with its last resource
	next.put(b.String(), resState{}, true)
	if got, _ := c.get(keyCluster(a), a.String()); got.Ready != "Ready" || c.size() != 2 {
		t.Fatalf("the original changed: %+v, %d resources", got, c.size())
	}
	if got, _ := next.get(keyCluster(a), a.String()); got.Ready != "NotReady" || next.size() != 1 {
		t.Fatalf("the clone: %+v, %d resources", got, next.size())
	}
	for _, k := range []status.ResourceKey{a, {App: "a|b", ClusterProvider: "cp", Cluster: "c"}, {App: "x", Cluster: "c"}, {App: "x", ClusterProvider: "p"}} {
		if keyCluster(k) != clusterOf(k.String()) {
			t.Errorf("%+v: keyCluster %q, clusterOf %q", k, keyCluster(k), clusterOf(k.String()))
		}
	}
}

// TestCursorMatchesFlatMap: random writes through clones of clones keep
// each cursor what a flat map of its own writes says, and leave the
// cursors they were cloned from as they were.
func TestCursorMatchesFlatMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	key := func() string {
		return status.ResourceKey{App: "a", ClusterProvider: "cp", Cluster: fmt.Sprintf("c%d", rng.IntN(4)), Kind: "ConfigMap",
			Name: fmt.Sprintf("n%d", rng.IntN(5))}.String()
	}
	var c cursor
	model := map[string]resState{}
	for range 200 {
		before, was := c, maps.Clone(model)
		next := c.clone()
		for range rng.IntN(6) {
			k, rs := key(), resState{Ready: fmt.Sprint(rng.IntN(3))}
			remove := rng.IntN(3) == 0
			next.put(k, rs, remove)
			if remove {
				delete(model, k)
			} else {
				model[k] = rs
			}
		}
		for _, chk := range []struct {
			c    cursor
			want map[string]resState
		}{{before, was}, {next, model}} {
			got := map[string]resState{}
			for _, m := range chk.c.clusters {
				maps.Copy(got, m)
			}
			if !maps.Equal(got, chk.want) {
				t.Fatalf("cursor %v, want %v", got, chk.want)
			}
		}
		c = next
	}
}
