package rsync

import (
	"context"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// claims is what the dispatchers tell ownership: the test itself moves
// groups between them (claimSet).
type claims struct{}

// claimSet hands each group to one of several dispatchers, as ownership
// would.
type claimSet struct {
	mu    sync.Mutex
	owner map[string]*Dispatcher
}

func (claims) Want(string) {}
func (claims) Drop(string) {}

// give moves a group to d: the old owner releases it first.
func (cs *claimSet) give(group string, d *Dispatcher) {
	cs.mu.Lock()
	old := cs.owner[group]
	cs.mu.Unlock()
	if old != nil {
		old.Released(group)
	}
	cs.mu.Lock()
	cs.owner[group] = d
	cs.mu.Unlock()
	d.Acquired(group)
}

// newDispatcher is one replica's engine and dispatcher on the store.
func newDispatcher(t *testing.T, store *appcontext.Store, clusters Clusters, cs *claimSet) *Dispatcher {
	t.Helper()
	e, err := New(Options{Store: store, Clusters: clusters, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		WaitBase: 20 * time.Millisecond, WaitMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(DispatcherOptions{Engine: e, Claims: claims{}, StopWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cs.mu.Lock()
		var mine []string
		for g, o := range cs.owner {
			if o == d {
				mine = append(mine, g)
			}
		}
		cs.mu.Unlock()
		for _, g := range mine {
			d.Released(g)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		e.Close()
	})
	return d
}

// An action requested through one replica is run by the group's owner;
// Busy and Idle answer on any replica; a handover moves the action to the
// new owner, which finishes it; Stop through a non-owner stops the owner's
// run.
func TestDispatchAcrossReplicas(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	var mu sync.Mutex
	block := map[string]bool{"b": true}
	fc.dyn.PrependReactor("patch", "*", (&patches{answer: func(_, name string, _ int, _ []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if block[name] {
			return &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}
		}
		return nil
	}}).reactor)
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cs := &claimSet{owner: map[string]*Dispatcher{}}
	d1 := newDispatcher(t, store, fc, cs)
	d2 := newDispatcher(t, store, fc, cs)

	id := createContext(t, store, manifest("v1", "ConfigMap", "a", "default", nil), manifest("v1", "ConfigMap", "b", "default", nil))
	group := "g/" + id
	cs.give(group, d1)
	d2.Instantiate(group, id)
	if !d2.Busy(group) || !d1.Busy(group) {
		t.Fatal("a requested action is not busy on every replica")
	}
	waitFor(t, store, id, "a applied by the owner", func(c *appcontext.Context) bool {
		return statusOf(c, "ConfigMap/default/a").Status == appcontext.RsyncApplied
	})
	if !d1.opts.Engine.Busy(group) || d2.opts.Engine.Busy(group) {
		t.Fatal("the action does not run on the owner alone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d2.Idle(ctx, group); err != nil {
		t.Fatalf("Idle through the other replica: %v", err)
	}

	cs.give(group, d2) // d1 cancels, d2 resumes from the record
	if d1.opts.Engine.Busy(group) {
		t.Fatal("the old owner still runs the action")
	}
	mu.Lock()
	block["b"] = false
	mu.Unlock()
	waitFor(t, store, id, "instantiated by the new owner", func(c *appcontext.Context) bool {
		return c.Status.Status == appcontext.Instantiated
	})
	deadline := time.Now().Add(30 * time.Second)
	for d1.Busy(group) {
		if time.Now().After(deadline) {
			t.Fatal("the finished action's record stays")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}

	// Stop through the replica that does not own the group.
	id2 := createContext(t, store, manifest("v1", "ConfigMap", "c", "default", nil))
	group2 := "g/" + id2
	mu.Lock()
	block["c"] = true
	mu.Unlock()
	cs.give(group2, d2)
	d1.Instantiate(group2, id2)
	waitFor(t, store, id2, "c retrying", func(c *appcontext.Context) bool {
		return statusOf(c, "ConfigMap/default/c").Status == appcontext.RsyncRetrying
	})
	if !d1.Stop(group2) {
		t.Fatal("Stop found nothing to stop")
	}
	if d2.opts.Engine.Busy(group2) || d1.Busy(group2) {
		t.Fatal("the action still runs after Stop")
	}
	if d1.Stop(group2) {
		t.Fatal("a second Stop found something to stop")
	}
	// A stopped action is not resumed by the next owner.
	cs.give(group2, d1)
	if d1.opts.Engine.Busy(group2) {
		t.Fatal("a stopped action was resumed by the next owner")
	}
}

// A context an earlier process left Instantiating without a record gets
// one, and its owner continues it.
func TestDispatcherResumesContextsWithoutRecords(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	fc.dyn.PrependReactor("patch", "*", (&patches{answer: func(string, string, int, []byte) error { return nil }}).reactor)
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	id := createContext(t, store, manifest("v1", "ConfigMap", "a", "default", nil))
	cs := &claimSet{owner: map[string]*Dispatcher{}}
	d := newDispatcher(t, store, fc, cs)
	deadline := time.Now().Add(30 * time.Second)
	for !d.Busy("g/" + id) {
		if time.Now().After(deadline) {
			t.Fatal("no record made for the unfinished context")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	cs.give("g/"+id, d)
	waitFor(t, store, id, "instantiated", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Instantiated })
}
