package ownership

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

func TestPickSpreadsAndMovesOnlyTheLeaversShare(t *testing.T) {
	members := []string{"r1", "r2", "r3"}
	count := map[string]int{}
	before := map[string]string{}
	for i := range 3000 {
		item := fmt.Sprintf("provider+cluster%d", i)
		owner := Pick(item, members)
		count[owner]++
		before[item] = owner
	}
	for _, m := range members {
		if count[m] < 800 || count[m] > 1200 {
			t.Errorf("%s got %d of 3000 items; want about 1000", m, count[m])
		}
	}
	// r2 leaves: only its items move, and they spread over the others.
	for item, owner := range before {
		after := Pick(item, []string{"r1", "r3"})
		if owner != "r2" && after != owner {
			t.Fatalf("%s moved from %s to %s although its owner stayed", item, owner, after)
		}
	}
	if Pick("x", nil) != "" {
		t.Fatal("no members must pick nobody")
	}
	if Pick("x", []string{"b", "a"}) != Pick("x", []string{"a", "b"}) {
		t.Fatal("the pick depends on the members' order")
	}
}

// ledger checks that no item is ever run by two replicas at once.
type ledger struct {
	t  *testing.T
	mu sync.Mutex
	by map[string]string // item → replica running it
}

func newLedger(t *testing.T) *ledger { return &ledger{t: t, by: map[string]string{}} }

func (l *ledger) handler(replica string) Handler {
	return HandlerFuncs{
		Acquire: func(item string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if other, ok := l.by[item]; ok {
				l.t.Errorf("%s acquired %s while %s runs it", replica, item, other)
			}
			l.by[item] = replica
		},
		Release: func(item string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.by[item] != replica {
				l.t.Errorf("%s released %s, run by %q", replica, item, l.by[item])
			}
			delete(l.by, item)
		},
	}
}

func (l *ledger) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.by)
}

// waitFor polls cond with a deadline.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not after %s: %s", what, timeout, detail)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

type replica struct {
	set    *Set
	kind   *Kind
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, cli *clientv3.Client, prefix, id string, ttl time.Duration, h Handler, items []string) *replica {
	t.Helper()
	set, err := New(Options{Client: cli, Prefix: prefix, ID: id, URL: "http://" + id, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	k := set.Kind("clusters", h)
	for _, item := range items {
		k.Want(item)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{set: set, kind: k, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- set.Run(ctx) }()
	t.Cleanup(r.stop)
	select {
	case <-set.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not registered after 30s", id)
	}
	return r
}

func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
}

func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p+c%02d", i)
	}
	return out
}

// Three replicas share 60 items, each run by exactly one; one leaves
// cleanly and the others take its items at once; a new one joins and
// takes its share; an item dropped everywhere is released.
func TestShareAndHandOver(t *testing.T) {
	prefix := env.EtcdPrefix()
	cli := env.Etcd.Client
	l := newLedger(t)
	all := items(60)
	rs := map[string]*replica{}
	for _, id := range []string{"r1", "r2", "r3"} {
		rs[id] = startReplica(t, cli, prefix, id, 5*time.Second, l.handler(id), all)
	}
	spread := func(ids ...string) func() (bool, string) {
		return func() (bool, string) {
			got := l.snapshot()
			if len(got) != len(all) {
				return false, fmt.Sprintf("%d of %d items run", len(got), len(all))
			}
			for item, by := range got {
				if want := Pick(item, ids); by != want {
					return false, fmt.Sprintf("%s run by %s, hashed to %s", item, by, want)
				}
			}
			return true, ""
		}
	}
	waitFor(t, "every item run by its replica", 30*time.Second, spread("r1", "r2", "r3"))
	claims, err := rs["r1"].set.Claims(context.Background(), "clusters")
	if err != nil || len(claims) != len(all) {
		t.Fatalf("claims in etcd: %d, %v", len(claims), err)
	}
	owned := 0
	for _, r := range rs {
		owned += len(r.kind.Owned())
	}
	if owned != len(all) {
		t.Fatalf("replicas say they own %d items, want %d", owned, len(all))
	}

	rs["r2"].stop()
	took := waitFor(t, "r2's items taken over after a clean stop", 30*time.Second, spread("r1", "r3"))
	t.Logf("handover after a clean stop: %s", took)

	rs["r4"] = startReplica(t, cli, prefix, "r4", 5*time.Second, l.handler("r4"), all)
	waitFor(t, "r4 takes its share", 30*time.Second, spread("r1", "r3", "r4"))

	for _, r := range []*replica{rs["r1"], rs["r3"], rs["r4"]} {
		r.kind.Drop(all[0])
	}
	waitFor(t, "a dropped item released", 30*time.Second, func() (bool, string) {
		_, ok := l.snapshot()[all[0]]
		return !ok, "still run"
	})
	members, err := rs["r1"].set.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range members {
		ids = append(ids, m.ID)
		if m.URL != "http://"+m.ID || m.LeaseExpires.IsZero() || m.Started.IsZero() {
			t.Errorf("member %+v lacks its url, start or lease expiry", m)
		}
	}
	if !slices.Equal(ids, []string{"r1", "r3", "r4"}) {
		t.Fatalf("members = %v", ids)
	}
}

// A replica cut off from etcd (its client closed, as a partition or a
// kill would) loses its lease: the others take its items within the TTL,
// and it released them itself.
func TestLeaseExpiryHandsOver(t *testing.T) {
	prefix := env.EtcdPrefix()
	l := newLedger(t)
	all := items(30)
	cut, err := clientv3.New(clientv3.Config{Endpoints: env.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	victim := startReplica(t, cut, prefix, "victim", 2*time.Second, l.handler("victim"), all)
	startReplica(t, env.Etcd.Client, prefix, "survivor", 2*time.Second, l.handler("survivor"), all)
	waitFor(t, "items shared", 30*time.Second, func() (bool, string) {
		got := l.snapshot()
		n := 0
		for _, by := range got {
			if by == "victim" {
				n++
			}
		}
		return len(got) == len(all) && n > 0, fmt.Sprintf("%d run, %d by the victim", len(got), n)
	})
	start := time.Now()
	_ = cut.Close()
	waitFor(t, "the survivor runs everything", 30*time.Second, func() (bool, string) {
		got := l.snapshot()
		for _, by := range got {
			if by != "survivor" {
				return false, "the victim still runs items"
			}
		}
		return len(got) == len(all), fmt.Sprintf("%d of %d run", len(got), len(all))
	})
	t.Logf("takeover after the victim lost etcd (TTL 2s): %s", time.Since(start).Round(10*time.Millisecond))
	victim.stop()
}

// A second process with a live replica's id waits for it instead of
// sharing its identity.
func TestDuplicateIDWaits(t *testing.T) {
	prefix := env.EtcdPrefix()
	l := newLedger(t)
	first := startReplica(t, env.Etcd.Client, prefix, "same", 5*time.Second, l.handler("first"), items(5))
	set, err := New(Options{Client: env.Etcd.Client, Prefix: prefix, ID: "same", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	set.Kind("clusters", l.handler("second"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- set.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-set.Ready():
		t.Fatal("the second replica registered under a live id")
	case <-time.After(500 * time.Millisecond): // proving a negative: it stays unregistered a while
	}
	first.stop()
	select {
	case <-set.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the second replica did not register after the first left")
	}
}

// Guard holds only while the claim is this replica's.
func TestGuard(t *testing.T) {
	prefix := env.EtcdPrefix()
	l := newLedger(t)
	r := startReplica(t, env.Etcd.Client, prefix, "g1", 5*time.Second, l.handler("g1"), []string{"item"})
	waitFor(t, "item acquired", 30*time.Second, func() (bool, string) { return r.kind.Owns("item"), "" })
	ctx := context.Background()
	resp, err := env.Etcd.Client.Txn(ctx).If(r.kind.Guard("item")).Then(clientv3.OpPut(prefix+"x", "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded write while holding: %v %v", resp, err)
	}
	resp, err = env.Etcd.Client.Txn(ctx).If(r.kind.Guard("other")).Then(clientv3.OpPut(prefix+"x", "2")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("guarded write of an item not held went through: %v %v", resp, err)
	}
	if got := r.kind.Holder("item"); got != "g1" {
		t.Fatalf("holder = %q", got)
	}
	owned := r.kind.Owned()
	sort.Strings(owned)
	if !slices.Equal(owned, []string{"item"}) {
		t.Fatalf("owned = %v", owned)
	}
}

// Lock is exclusive across replicas: a second replica waits while the
// first holds it, and gets it once released; names are separate locks.
func TestLockAcrossReplicas(t *testing.T) {
	prefix := env.EtcdPrefix()
	cli := env.Etcd.Client
	r1 := startReplica(t, cli, prefix, "r1", 5*time.Second, HandlerFuncs{}, nil)
	r2 := startReplica(t, cli, prefix, "r2", 5*time.Second, HandlerFuncs{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unlock1, err := r1.set.Lock(ctx, "dig:p/ca/v1/dig")
	if err != nil {
		t.Fatal(err)
	}
	other, err := r2.set.Lock(ctx, "dig:p/ca/v1/dig2") // another name is free
	if err != nil {
		t.Fatal(err)
	}
	other()
	got := make(chan func(), 1)
	go func() {
		unlock2, err := r2.set.Lock(ctx, "dig:p/ca/v1/dig")
		if err != nil {
			t.Error(err)
			unlock2 = func() {}
		}
		got <- unlock2
	}()
	// r2 is queued (its key is in etcd) and must still wait.
	waitFor(t, "r2 queued for the lock", 30*time.Second, func() (bool, string) {
		resp, err := cli.Get(ctx, strings.TrimRight(prefix, "/")+"/locks/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false, err.Error()
		}
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		return len(keys) == 2, fmt.Sprintf("lock keys %q", keys)
	})
	select {
	case <-got:
		t.Fatal("r2 took the lock r1 holds")
	default:
	}
	unlock1()
	select {
	case unlock2 := <-got:
		unlock2()
	case <-time.After(30 * time.Second):
		t.Fatal("r2 did not get the lock after r1 released it")
	}
}

// Handlers attached after the kind was made are called in the order
// attached on acquire and in reverse on release; a kind left without one
// stops Run before anything starts.
func TestHandlersAttachedBeforeRun(t *testing.T) {
	prefix := env.EtcdPrefix()
	bare, err := New(Options{Client: env.Etcd.Client, Prefix: prefix, ID: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	bare.Kind("groups", nil)
	if err := bare.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "groups has no handler") {
		t.Fatalf("Run with a kind without a handler: %v", err)
	}

	var mu sync.Mutex
	var calls []string
	record := func(what string) func(string) {
		return func(item string) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, what+" "+item)
		}
	}
	set, err := New(Options{Client: env.Etcd.Client, Prefix: prefix, ID: "r1", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k := set.Kind("groups", nil)
	k.Handle(HandlerFuncs{Acquire: record("acquire first"), Release: record("release first")})
	k.Handle(HandlerFuncs{Acquire: record("acquire second")}) // no Release: nothing to stop
	k.Want("g")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- set.Run(ctx) }()
	waitFor(t, "g acquired", 30*time.Second, func() (bool, string) { return k.Owns("g"), "" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []string{"acquire first g", "acquire second g", "release first g"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Handle after Run did not panic")
			}
		}()
		k.Handle(HandlerFuncs{})
	}()
}
