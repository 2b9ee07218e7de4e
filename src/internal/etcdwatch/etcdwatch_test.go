package etcdwatch

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

// mirror is a consumer: the keys it has, every (key, revision) it was
// handed (a replay shows as a second one), and its listings.
type mirror struct {
	mu       sync.Mutex
	state    map[string]string
	handed   map[string]int
	rev      int64
	listings []Batch
}

func newMirror() *mirror { return &mirror{state: map[string]string{}, handed: map[string]int{}} }

func (m *mirror) apply(b Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.Listed {
		m.listings = append(m.listings, b)
	}
	if b.Reset {
		m.state = map[string]string{}
	}
	for _, ev := range b.Events {
		m.handed[fmt.Sprintf("%s@%d/%t", ev.Key, ev.ModRevision, ev.Deleted)]++
		if ev.Deleted {
			delete(m.state, ev.Key)
		} else {
			m.state[ev.Key] = string(ev.Value)
		}
	}
	m.rev = max(m.rev, b.Revision)
}

// has is a condition for waitFor: the mirror holds exactly w.
func (m *mirror) has(w map[string]string) func() (bool, string) {
	return func() (bool, string) {
		got, _ := m.snapshot()
		return maps.Equal(got, w), fmt.Sprintf("have %v, want %v", got, w)
	}
}

func (m *mirror) snapshot() (map[string]string, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.state), m.rev
}

// runFollower runs a follower until the test ends.
func runFollower(t *testing.T, opts Options) {
	t.Helper()
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s: %s", what, detail)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// A follower cut off from etcd while keys change and etcd compacts past
// its watch lists again on reconnecting, and ends up with exactly etcd's
// keys: deletions during the gap come as deletes, and nothing it already
// had is handed over again.
func TestRecoversFromCompactionWhileCutOff(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	direct := env.Etcd.Client
	for _, k := range []string{"a", "b", "c"} {
		if _, err := direct.Put(ctx, prefix+k, k+"1"); err != nil {
			t.Fatal(err)
		}
	}
	cut, proxy := env.EtcdBehindProxy(t)
	m := newMirror()
	runFollower(t, Options{Client: cut, Prefixes: []string{prefix}, Apply: m.apply,
		Retry: backoff.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	want := m.has
	waitFor(t, "the first listing", want(map[string]string{prefix + "a": "a1", prefix + "b": "b1", prefix + "c": "c1"}))
	if _, err := direct.Put(ctx, prefix+"a", "a2"); err != nil { // followed by the watch
		t.Fatal(err)
	}
	waitFor(t, "a watched change", want(map[string]string{prefix + "a": "a2", prefix + "b": "b1", prefix + "c": "c1"}))

	proxy.Cut()
	if _, err := direct.Delete(ctx, prefix+"b"); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Put(ctx, prefix+"c", "c2"); err != nil {
		t.Fatal(err)
	}
	resp, err := direct.Put(ctx, prefix+"d", "d1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	waitFor(t, "recovered after the gap", want(map[string]string{prefix + "a": "a2", prefix + "c": "c2", prefix + "d": "d1"}))
	_, rev := m.snapshot()
	if rev < resp.Header.Revision {
		t.Fatalf("the follower says it is at %d, before the last change (%d)", rev, resp.Header.Revision)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for k, n := range m.handed {
		if n > 1 {
			t.Errorf("%s was handed over %d times", k, n)
		}
	}
	if len(m.listings) < 2 {
		t.Fatalf("%d listings; the gap should have caused a second", len(m.listings))
	}
	again := m.listings[len(m.listings)-1]
	var got []string
	for _, ev := range again.Events {
		got = append(got, fmt.Sprintf("%s deleted=%t", strings.TrimPrefix(ev.Key, prefix), ev.Deleted))
	}
	if strings.Join(got, ", ") != "c deleted=false, d deleted=false, b deleted=true" || again.First {
		t.Fatalf("the listing after the gap handed over [%s] (first=%t); want c and d put, b deleted, a untouched", strings.Join(got, ", "), again.First)
	}
}

// With HashKeys the follower cannot name a key that went during a gap: a
// listing after a gap with a deletion comes whole, as a Reset, and the
// consumer ends up with exactly etcd's keys; one after a gap without
// deletions hands over only what changed, as without HashKeys.
func TestHashedKeysResetAfterAGapWithDeletions(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	direct := env.Etcd.Client
	put := func(k, v string) int64 {
		t.Helper()
		resp, err := direct.Put(ctx, prefix+k, v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	for _, k := range []string{"a", "b", "c"} {
		put(k, k+"1")
	}
	cut, proxy := env.EtcdBehindProxy(t)
	m := newMirror()
	runFollower(t, Options{Client: cut, Prefixes: []string{prefix}, Apply: m.apply, HashKeys: true,
		Retry: backoff.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	want := m.has
	waitFor(t, "the first listing", want(map[string]string{prefix + "a": "a1", prefix + "b": "b1", prefix + "c": "c1"}))
	put("a", "a2")
	waitFor(t, "a watched change", want(map[string]string{prefix + "a": "a2", prefix + "b": "b1", prefix + "c": "c1"}))
	gap := func(change func() int64) Batch {
		t.Helper()
		m.mu.Lock()
		listings := len(m.listings)
		m.mu.Unlock()
		proxy.Cut()
		rev := change()
		if _, err := direct.Compact(ctx, rev); err != nil {
			t.Fatal(err)
		}
		proxy.Heal()
		waitFor(t, "a listing after the gap", func() (bool, string) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return len(m.listings) > listings, fmt.Sprintf("%d listings", len(m.listings))
		})
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.listings[len(m.listings)-1]
	}
	keys := func(b Batch) string {
		var got []string
		for _, ev := range b.Events {
			got = append(got, fmt.Sprintf("%s deleted=%t", strings.TrimPrefix(ev.Key, prefix), ev.Deleted))
		}
		return strings.Join(got, ", ")
	}

	b := gap(func() int64 {
		if _, err := direct.Delete(ctx, prefix+"b"); err != nil {
			t.Fatal(err)
		}
		put("c", "c2")
		return put("d", "d1")
	})
	if !b.Reset || b.First || keys(b) != "a deleted=false, c deleted=false, d deleted=false" {
		t.Fatalf("after a gap with a deletion: [%s] reset=%t first=%t; want a whole listing (a, c, d) as a Reset", keys(b), b.Reset, b.First)
	}
	waitFor(t, "etcd's keys after the reset", want(map[string]string{prefix + "a": "a2", prefix + "c": "c2", prefix + "d": "d1"}))

	// Two changes: the compaction must pass the revision the watch goes on from.
	b = gap(func() int64 { put("e", "e1"); return put("f", "f1") })
	if b.Reset || keys(b) != "e deleted=false, f deleted=false" {
		t.Fatalf("after a gap without a deletion: [%s] reset=%t; want e and f alone, no Reset", keys(b), b.Reset)
	}
	waitFor(t, "etcd's keys after the second gap", want(map[string]string{prefix + "a": "a2", prefix + "c": "c2", prefix + "d": "d1", prefix + "e": "e1", prefix + "f": "f1"}))
	put("c", "c3")
	if _, err := direct.Delete(ctx, prefix+"a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watched changes after it", want(map[string]string{prefix + "c": "c3", prefix + "d": "d1", prefix + "e": "e1", prefix + "f": "f1"}))
}

// Two prefixes are listed at one revision and followed together; a
// progress notification moves the revision on without events.
func TestPrefixesAndProgress(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	cli := env.Etcd.Client
	m := newMirror()
	runFollower(t, Options{Client: cli, Prefixes: []string{prefix + "x/", prefix + "y/"}, Apply: m.apply})
	if _, err := cli.Put(ctx, prefix+"x/1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"y/1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"z/1", "1"); err != nil { // not followed
		t.Fatal(err)
	}
	waitFor(t, "both prefixes followed", func() (bool, string) {
		got, _ := m.snapshot()
		return len(got) == 2 && got[prefix+"x/1"] == "1" && got[prefix+"y/1"] == "1", fmt.Sprint(got)
	})
	// A write elsewhere, then a progress request: the follower learns it
	// is at that revision although nothing under its prefixes changed.
	resp, err := cli.Put(ctx, prefix+"z/2", "1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "progress reported", func() (bool, string) {
		_ = cli.RequestProgress(clientv3.WithRequireLeader(ctx))
		_, rev := m.snapshot()
		return rev >= resp.Header.Revision, fmt.Sprintf("at %d, want %d", rev, resp.Header.Revision)
	})
}

// WaitChange returns on a change after the revision read, not on a
// progress notification, and with ctx's error when ctx ends.
func TestWaitChange(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	cli := env.Etcd.Client
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- WaitChange(ctx, cli, resp.Header.Revision, true, prefix+"a/", prefix+"b/") }()
	_ = cli.RequestProgress(clientv3.WithRequireLeader(ctx))
	select {
	case err := <-got:
		t.Fatalf("returned without a change: %v", err)
	case <-time.After(200 * time.Millisecond): // proving a negative: it keeps waiting a while
	}
	if _, err := cli.Put(ctx, prefix+"b/1", "1"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitChange(cctx, cli, resp.Header.Revision+100, false, prefix+"a"); err == nil {
		t.Fatal("an ended context returned no error")
	}
}
