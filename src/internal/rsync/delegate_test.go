package rsync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// fakeAgent is a Delegate whose "agent" applies (or deletes) what is
// published at once: it records the resources' statuses in the context,
// as the fleet hub stores what an agent reports, then settles.
type fakeAgent struct {
	store *appcontext.Store
	cache *appcontext.Cache

	mu        sync.Mutex
	published []bool // del, per Publish
	forgotten int
	follow    chan Progress
}

func (f *fakeAgent) Pulls(ref appcontext.ClusterRef) bool { return ref == c1 }

func (f *fakeAgent) Publish(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, kind WorkKind) (int64, error) {
	del := kind == WorkDelete
	f.mu.Lock()
	f.published = append(f.published, del)
	gen := int64(len(f.published))
	f.mu.Unlock()
	var updates []appcontext.StatusUpdate
	for _, r := range p.Resources {
		st := appcontext.ResourceStatus{Status: appcontext.RsyncApplied, Manifest: r.ManifestRef.SHA256}
		if del {
			st = appcontext.ResourceStatus{Status: appcontext.RsyncDeleted}
		}
		updates = append(updates, appcontext.StatusUpdate{App: p.App, Cluster: p.Cluster, Key: r.Key(), Status: st})
	}
	if err := f.store.SetResourceStatuses(ctx, c.Meta.ID, updates, nil); err != nil {
		return 0, err
	}
	resp, err := f.store.Client().Get(ctx, "x")
	if err != nil {
		return 0, err
	}
	f.follow <- Progress{Generation: gen, Quiet: true, Settled: true, Revision: resp.Header.Revision}
	return gen, nil
}

func (f *fakeAgent) Follow(string, string, appcontext.ClusterRef) (<-chan Progress, func()) {
	return f.follow, func() {}
}

func (f *fakeAgent) WaitObserved(ctx context.Context, rev int64) error {
	return f.cache.WaitRevision(ctx, rev)
}

func (f *fakeAgent) Forget(context.Context, string, string, appcontext.ClusterRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten++
	return nil
}

// A pull cluster's placement is never applied by this engine: it is
// published, the agent's statuses are counted into the context's status,
// and its deletion is published too, then forgotten.
func TestPullPlacementsAreDelegated(t *testing.T) {
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cache := appcontext.NewCache(store, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	defer func() { cancel(); <-done }()
	agent := &fakeAgent{store: store, cache: cache, follow: make(chan Progress, 4)}
	fc := newFakeCluster(coreKinds()...)
	fc.err = errdefs.Unavailable(nil, "a pull cluster is never dialled") // any apply here would fail
	e, err := New(Options{Store: store, Clusters: fc, Observed: cache, Delegate: agent, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	id := createContext(t, store, manifest("v1", "ConfigMap", "a", "default", nil), manifest("v1", "ConfigMap", "b", "default", nil))
	e.Instantiate("g/"+id, id)
	c := waitFor(t, store, id, "Instantiated through the agent", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Instantiated })
	for _, key := range []string{"ConfigMap/default/a", "ConfigMap/default/b"} {
		if st := statusOf(c, key); st.Status != appcontext.RsyncApplied {
			t.Errorf("%s: %+v", key, st)
		}
	}
	e.Terminate("g/"+id, id)
	waitFor(t, store, id, "Terminated through the agent", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Terminated })
	agent.mu.Lock()
	defer agent.mu.Unlock()
	if len(agent.published) != 2 || agent.published[0] || !agent.published[1] || agent.forgotten != 1 {
		t.Errorf("published %v, forgotten %d; want an apply, a deletion, then the work forgotten", agent.published, agent.forgotten)
	}
}
