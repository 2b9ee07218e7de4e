package rsync

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/cluster"
)

// clusterState is what rsync keeps per cluster, across actions: a bound on
// the requests in flight to it, its schemas, and, while some resource on it
// waits for its API to change, watches that say when it does.
type clusterState struct {
	sem     chan struct{}
	perKind int // the most requests of one kind in flight
	schemas schemas
	kinds   map[schema.GroupKind]chan struct{} // under mu

	mu        sync.Mutex
	gen       uint64                          // counts the changes of the cluster's API seen
	refreshed map[*cluster.Client]refreshMark // when each client's discovery was fetched again
	changed   chan struct{}                   // closed on the next change of the cluster's API
	waiters   int                             // resources waiting on changed; watches run while > 0
	stop      context.CancelFunc
	client    *cluster.Client // the client the watches use
}

// cluster returns the state of ref, creating it on first use.
func (e *Engine) cluster(ref appcontext.ClusterRef) *clusterState {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs := e.clusters[ref]
	if cs == nil {
		cs = &clusterState{sem: make(chan struct{}, e.opts.ClusterParallelism), changed: make(chan struct{}),
			perKind: max(1, e.opts.ClusterParallelism/4), kinds: map[schema.GroupKind]chan struct{}{}}
		e.clusters[ref] = cs
	}
	return cs
}

// acquire takes one of the cluster's request slots; false if ctx ended.
func (cs *clusterState) acquire(ctx context.Context) bool {
	select {
	case cs.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (cs *clusterState) release() { <-cs.sem }

// acquireKind takes a slot for a request about kind gk, and then one of the
// cluster's; false if ctx ended. No kind holds more than a quarter of the
// cluster's slots: API servers process some kinds one at a time (a Service
// allocates its ClusterIP under a lock), and twenty of those queued must
// not hold up every other request.
func (cs *clusterState) acquireKind(ctx context.Context, gk schema.GroupKind) (release func(), ok bool) {
	cs.mu.Lock()
	ks := cs.kinds[gk]
	if ks == nil {
		ks = make(chan struct{}, cs.perKind)
		cs.kinds[gk] = ks
	}
	cs.mu.Unlock()
	select {
	case ks <- struct{}{}:
	case <-ctx.Done():
		return nil, false
	}
	if !cs.acquire(ctx) {
		<-ks
		return nil, false
	}
	return func() { cs.release(); <-ks }, true
}

// minRefresh is how often a kind a client's discovery lacks may make rsync
// fetch its discovery again, unless the cluster's API changed since.
const minRefresh = time.Second

type refreshMark struct {
	gen uint64
	at  time.Time
}

// mayRefresh reports whether client's discovery may be fetched again now:
// the cluster's API changed since it last was, or a second passed. Each
// client (the cluster's own, a logical cloud's) has its own discovery.
func (cs *clusterState) mayRefresh(client *cluster.Client) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.refreshed == nil {
		cs.refreshed = map[*cluster.Client]refreshMark{}
	}
	m, seen := cs.refreshed[client]
	if seen && m.gen == cs.gen && time.Since(m.at) < minRefresh {
		return false
	}
	cs.refreshed[client] = refreshMark{gen: cs.gen, at: time.Now()}
	return true
}

// Kinds whose changes may make a waiting resource appliable: a CRD
// established, an aggregated API available, a namespace created or gone.
var watchedForChanges = []schema.GroupVersionResource{
	{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"},
	{Version: "v1", Resource: "namespaces"},
}

// subscribe returns a channel closed on the next change of the cluster's
// API, and starts watching for changes if nobody was. Call release when
// no longer waiting: the watches stop with the last waiter.
func (e *Engine) subscribe(ref appcontext.ClusterRef, client *cluster.Client) (<-chan struct{}, func()) {
	cs := e.cluster(ref)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.waiters++
	if client != nil && client.Metadata != nil && (cs.stop == nil || cs.client != client) {
		if cs.stop != nil {
			cs.stop() // the kubeconfig changed: watch with the new client
		}
		ctx, cancel := context.WithCancel(e.ctx)
		cs.stop, cs.client = cancel, client
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.watchChanges(ctx, ref, cs, client)
		}()
	}
	ch := cs.changed
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			cs.waiters--
			if cs.waiters == 0 && cs.stop != nil {
				cs.stop()
				cs.stop, cs.client = nil, nil
			}
		})
	}
}

// changeWindow coalesces a burst of changes (an informer's initial list, a
// chart installing twenty CRDs) into one rediscovery.
const changeWindow = 100 * time.Millisecond

// watchChanges runs metadata informers on the kinds whose changes matter
// and, after each burst of events, forgets the cluster's discovery and
// schemas and wakes the waiters. Handlers only signal; the loop does the work.
func (e *Engine) watchChanges(ctx context.Context, ref appcontext.ClusterRef, cs *clusterState, client *cluster.Client) {
	log := e.log.WithField("cluster", ref.String())
	signal := make(chan struct{}, 1)
	notify := func() {
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, gvr := range watchedForChanges {
		inf := metadatainformer.NewFilteredMetadataInformer(client.Metadata, gvr, "", 0, cache.Indexers{}, nil).Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			log.WithError(err).Warn("cannot watch for API changes")
			continue
		}
		// A watch the credentials do not allow keeps failing quietly;
		// waiting resources then rely on their periodic re-check.
		_ = inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {})
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	log.Debug("watching the cluster's API for changes")
	for {
		select {
		case <-ctx.Done():
			return
		case <-signal:
		}
		if !backoff.Sleep(ctx, changeWindow) { // let the burst finish
			return
		}
		select {
		case <-signal:
		default:
		}
		e.clusterChanged(cs)
	}
}

// clusterChanged forgets what rsync cached about the cluster's API (each
// client's discovery is fetched again at its next unknown kind) and wakes
// everything waiting for it.
func (e *Engine) clusterChanged(cs *clusterState) {
	cs.schemas.reset()
	cs.mu.Lock()
	cs.gen++
	close(cs.changed)
	cs.changed = make(chan struct{})
	cs.mu.Unlock()
}
