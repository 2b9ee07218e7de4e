package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// errNotPlaced marks a bundle whose labels name no live context placing
// that app on the watcher's cluster.
var errNotPlaced = errors.New("no live context places this bundle's app on this cluster")

// clusterWatcher watches one cluster; its goroutines end with its context.
type clusterWatcher struct {
	m      *Manager
	ref    appcontext.ClusterRef
	cancel context.CancelFunc
	done   chan struct{}
	log    *logrus.Entry

	// fence guards every write; the cluster's state lives on its lease.
	fence ownership.Fence

	mu      sync.Mutex
	writeMu sync.Mutex // orders state writes: a newer state is never overwritten by an older one
	state   appcontext.ClusterState
	// Until it has published, a watcher keeps its state to itself: the
	// cluster shows what the watcher before it published (or nothing, so
	// Unknown, when that one died with its lease) until this one has
	// stored every bundle it found. published says it has; initial are
	// the bundles listed at start not yet stored (nil before the list),
	// seen those stored so far, askedPublish that the list is in.
	published, askedPublish bool
	// lastStored is the state last written on the lease, and detached
	// says it was handed over (detach): nothing is written after that.
	lastStored    *appcontext.ClusterState
	detached      bool
	initial, seen map[string]bool
	renewTime     string
	silence       *time.Timer
	// bundles remembers which context and app each bundle key belongs to,
	// so a delete can be recorded after the object left the cache.
	bundles map[string][2]string
	written map[string]string // bundle key → resourceVersion last stored
}

func (w *clusterWatcher) stop() {
	w.cancel()
	<-w.done
}

// publishKey is the queue's item for "publish once the bundles listed at
// start are stored": no bundle key is empty.
const publishKey = ""

func (w *clusterWatcher) run(ctx context.Context) {
	w.bundles, w.written, w.seen = map[string][2]string{}, map[string]string{}, map[string]bool{}
	// The state published before (by this cluster's previous watcher) is
	// where this one's changes start from, so what stayed the same (how
	// long it has been unreachable) stays the same.
	if st, ok, err := w.m.opts.Store.ClusterState(ctx, w.ref); err == nil && ok {
		w.state = st
	}
	defer func() {
		w.mu.Lock()
		if w.silence != nil {
			w.silence.Stop()
		}
		w.mu.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()

	client, err := w.m.opts.Clusters.Client(ctx, w.ref)
	for retry := clientRetry(); err != nil; {
		w.noClient(err)
		if !retry.Wait(ctx) {
			return
		}
		client, err = w.m.opts.Clusters.Client(ctx, w.ref)
	}
	kube, err := kubernetes.NewForConfig(client.Config)
	if err != nil {
		w.log.WithError(err).Error("cannot build a client")
		return
	}

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bundles-" + w.ref.String()})
	defer queue.ShutDown()
	bundles := dynamicinformer.NewFilteredDynamicInformer(client.Dynamic, v1alpha1.GVR(), "", 0, cache.Indexers{},
		func(lo *metav1.ListOptions) { lo.LabelSelector = v1alpha1.LabelContextID }).Informer()
	enqueue := func(obj any) {
		w.available()
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	listed, _ := bundles.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	})
	_ = bundles.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { w.watchError(ctx, err) })

	leaseFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(w.m.opts.LeaseNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.m.opts.LeaseName).String()
		}))
	leases := leaseFactory.Coordination().V1().Leases().Informer()
	_, _ = leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.onLease,
		UpdateFunc: func(_, o any) { w.onLease(o) },
		DeleteFunc: func(any) { w.monitorGone("the monitor's Lease was deleted") },
	})
	_ = leases.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { w.watchError(ctx, err) })
	defer leaseFactory.Shutdown()

	wg.Add(3)
	go func() { defer wg.Done(); bundles.Run(ctx.Done()) }()
	go func() { defer wg.Done(); w.probe(ctx, kube) }()
	go func() {
		defer wg.Done()
		for w.processNext(ctx, queue, bundles) {
		}
	}()
	leaseFactory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), leases.HasSynced, listed.HasSynced) {
		w.available()
		if len(leases.GetStore().ListKeys()) == 0 {
			w.monitorGone("no monitor Lease " + w.m.opts.LeaseNamespace + "/" + w.m.opts.LeaseName)
		}
		w.listed(bundles.GetStore().ListKeys())
		queue.Add(publishKey) // after every bundle listed
	}
	<-ctx.Done()
}

// listed records the bundles the cluster has at start: the state is
// published once each is stored.
func (w *clusterWatcher) listed(keys []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.initial = map[string]bool{}
	for _, k := range keys {
		if !w.seen[k] {
			w.initial[k] = true
		}
	}
}

// stored records a bundle stored (or one no live context places here,
// which nothing waits for); the state is published when it was the last
// one it waited for.
func (w *clusterWatcher) stored(ctx context.Context, key string) error {
	w.mu.Lock()
	w.seen[key] = true
	delete(w.initial, key)
	ready := w.askedPublish && !w.published && len(w.initial) == 0
	w.mu.Unlock()
	if !ready {
		return nil
	}
	return w.publish(ctx)
}

// askPublish publishes the state once every bundle listed at start is
// stored (now, or when the last one is).
func (w *clusterWatcher) askPublish(ctx context.Context) error {
	w.mu.Lock()
	w.askedPublish = true
	ready := !w.published && w.initial != nil && len(w.initial) == 0
	w.mu.Unlock()
	if !ready {
		return nil
	}
	return w.publish(ctx)
}

// publish says what the cluster's bundles no longer hold (the bundles of
// placed apps deleted while nobody watched), then writes the watcher's
// state on its lease: from now on the cluster is believed on this
// watcher's word. Called from the bundle worker, so no bundle is stored
// meanwhile.
func (w *clusterWatcher) publish(ctx context.Context) error {
	if err := w.missingBundles(ctx); err != nil {
		return err
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	st := w.state
	w.mu.Unlock()
	if err := w.store(st); err != nil {
		return err
	}
	w.mu.Lock()
	w.published = true
	w.mu.Unlock()
	w.log.Info("watcher publishes the cluster's state: its bundles are stored")
	return nil
}

// missingBundles stores as deleted the snapshots of placed apps whose
// bundle the cluster no longer has.
func (w *clusterWatcher) missingBundles(ctx context.Context) error {
	have := map[[2]string]bool{}
	w.mu.Lock()
	for _, owner := range w.bundles {
		have[owner] = true
	}
	w.mu.Unlock()
	for id, apps := range w.m.placedOn(w.ref) {
		for app := range apps {
			if have[[2]string{id, app}] {
				continue
			}
			snap, ok, err := w.m.opts.Store.Bundle(ctx, id, app, w.ref)
			if err != nil {
				return err
			}
			if !ok || snap.Deleted {
				continue
			}
			err = w.m.opts.Store.PutBundle(ctx, id, app, w.ref, appcontext.BundleSnapshot{Deleted: true, Received: w.m.opts.Now().UTC()},
				w.fence.Guards()...)
			if err != nil && !errors.Is(err, appcontext.ErrGuard) {
				return err
			}
		}
	}
	return nil
}

// detach leaves the published state in etcd off this watcher's lease, for
// the cluster's next watcher to replace (see Manager.Released).
func (w *clusterWatcher) detach(ctx context.Context) {
	// Under writeMu, and nothing stored after: a write in flight (the
	// silence timer's, which Stop does not wait for) would put the state
	// back on the lease that is about to go.
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	last := w.lastStored
	w.detached = true
	w.mu.Unlock()
	if last == nil || w.fence.Lease() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := w.m.opts.Store.PutClusterStateOn(ctx, w.ref, *last, 0, w.fence.Guards()...)
	if err != nil && !errors.Is(err, appcontext.ErrGuard) {
		w.log.WithError(err).Warn("cannot leave the cluster's state to its next watcher; it goes with this replica's lease")
	}
}

func (w *clusterWatcher) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], inf cache.SharedIndexInformer) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if key == publishKey {
		if err := w.askPublish(ctx); err != nil && ctx.Err() == nil {
			w.log.WithError(err).Warn("cannot publish the cluster's state; retrying")
			queue.AddRateLimited(key)
		}
		return true
	}
	err := w.syncBundle(ctx, key, inf)
	if err == nil || errors.Is(err, errNotPlaced) {
		if perr := w.stored(ctx, key); perr != nil && ctx.Err() == nil {
			w.log.WithError(perr).Warn("cannot publish the cluster's state; retrying")
			queue.AddRateLimited(publishKey)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			entry := w.log.WithError(err).WithField("bundle", key)
			if errors.Is(err, errNotPlaced) {
				// A context created a moment ago may not be known yet; a
				// stranger's bundle is retried ever more rarely.
				entry.Debug("bundle of no context placed here; retrying")
			} else {
				entry.Warn("cannot store bundle snapshot; retrying")
			}
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}

// syncBundle stores the cached bundle's status into its context.
func (w *clusterWatcher) syncBundle(ctx context.Context, key string, inf cache.SharedIndexInformer) error {
	obj, exists, err := inf.GetStore().GetByKey(key)
	if err != nil {
		return err
	}
	w.mu.Lock()
	owner, known := w.bundles[key]
	w.mu.Unlock()
	if !exists {
		if !known {
			return nil
		}
		err := w.m.opts.Store.PutBundle(ctx, owner[0], owner[1], w.ref, appcontext.BundleSnapshot{Deleted: true, Received: w.m.opts.Now().UTC()},
			w.fence.Guards()...)
		if errors.Is(err, appcontext.ErrGuard) {
			return nil // no longer this replica's cluster: its next watcher stores it
		}
		if err == nil {
			w.mu.Lock()
			delete(w.bundles, key)
			delete(w.written, key)
			w.mu.Unlock()
		}
		return err
	}
	u := obj.(*unstructured.Unstructured)
	statusID, app := u.GetLabels()[v1alpha1.LabelContextID], u.GetLabels()[v1alpha1.LabelApp]
	if statusID == "" || app == "" {
		return nil
	}
	// The labels name where the snapshot is stored: only a live context
	// that places this app on this cluster may be written to, whatever
	// else a bundle on the cluster claims.
	id, ok := w.m.placedContext(w.ref, statusID, app)
	if !ok {
		return fmt.Errorf("%w: context %.40q, app %.60q", errNotPlaced, statusID, app)
	}
	w.mu.Lock()
	w.bundles[key] = [2]string{id, app}
	same := w.written[key] == u.GetResourceVersion()
	w.mu.Unlock()
	if same {
		return nil
	}
	status, err := json.Marshal(u.Object["status"])
	if err != nil {
		return err
	}
	snap := appcontext.BundleSnapshot{ResourceVersion: u.GetResourceVersion(), Status: status, Received: w.m.opts.Now().UTC()}
	if err := checkBundle(status); err != nil {
		w.log.WithError(err).WithField("bundle", key).Warn("ResourceBundleState refused")
		snap.Status, snap.Refused = nil, "ResourceBundleState "+key+" refused: "+err.Error()
	}
	if err := w.m.opts.Store.PutBundle(ctx, id, app, w.ref, snap, w.fence.Guards()...); errors.Is(err, appcontext.ErrGuard) {
		return nil // no longer this replica's cluster: its next watcher stores it
	} else if err != nil {
		return err
	}
	w.mu.Lock()
	w.written[key] = u.GetResourceVersion()
	w.mu.Unlock()
	return nil
}

// onLease records a renewal: a renewTime different from the last one seen.
func (w *clusterWatcher) onLease(obj any) {
	w.available()
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return
	}
	renew := l.Spec.RenewTime.String()
	w.mu.Lock()
	changed := renew != w.renewTime
	w.renewTime = renew
	if changed {
		if w.silence != nil {
			w.silence.Stop()
		}
		w.silence = time.AfterFunc(w.m.opts.SilentAfter, w.silent)
	}
	w.mu.Unlock()
	if changed {
		w.update(func(s *appcontext.ClusterState) {
			s.Monitor, s.Reason, s.LastSeen = appcontext.MonitorRunning, "", w.m.opts.Now().UTC()
		})
	}
}

func (w *clusterWatcher) silent() {
	w.update(func(s *appcontext.ClusterState) {
		if s.Monitor == appcontext.MonitorRunning {
			s.Monitor = appcontext.MonitorSilent
			s.Reason = "monitor silent since " + s.LastSeen.Format(time.RFC3339)
		}
	})
}

func (w *clusterWatcher) monitorGone(reason string) {
	w.update(func(s *appcontext.ClusterState) { s.Monitor, s.Reason = appcontext.MonitorNotInstalled, reason })
}

// watchError handles a list failure: a missing resource means the monitor
// (its CRD) is not installed; anything else that the cluster cannot be
// reached.
func (w *clusterWatcher) watchError(ctx context.Context, err error) {
	if apierrors.IsNotFound(err) {
		w.monitorGone("the ResourceBundleState CRD is not installed")
		return
	}
	if ctx.Err() == nil {
		w.unreachable(err)
	}
}

// probe checks every ProbeInterval that the API server answers /readyz.
func (w *clusterWatcher) probe(ctx context.Context, kube kubernetes.Interface) {
	t := time.NewTicker(w.m.opts.ProbeInterval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, w.m.opts.ProbeInterval)
		_, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.unreachable(err)
		default:
			w.available()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// noClient records why no client could be built: a refused kubeconfig
// makes the cluster unusable, with the reason in its state; anything else
// (the catalogue is unreachable) leaves it merely unreachable.
func (w *clusterWatcher) noClient(err error) {
	if !errors.Is(err, errdefs.ErrInvalid) {
		w.unreachable(fmt.Errorf("no client: %w", err))
		return
	}
	w.update(func(s *appcontext.ClusterState) {
		if s.Connectivity != appcontext.Unreachable {
			s.Connectivity, s.UnreachableSince = appcontext.Unreachable, w.m.opts.Now().UTC()
		}
		if s.UnusableReason != err.Error() {
			s.UnusableReason = err.Error()
			w.log.WithError(err).Error("cluster unusable")
		}
	})
}

func (w *clusterWatcher) unreachable(err error) {
	w.update(func(s *appcontext.ClusterState) {
		if s.Connectivity != appcontext.Unreachable {
			s.Connectivity, s.UnreachableSince = appcontext.Unreachable, w.m.opts.Now().UTC()
			w.log.WithError(err).Warn("cluster unreachable")
		}
	})
}

func (w *clusterWatcher) available() {
	w.update(func(s *appcontext.ClusterState) {
		if s.Connectivity != appcontext.Available {
			s.Connectivity, s.UnreachableSince, s.UnusableReason = appcontext.Available, time.Time{}, ""
		}
	})
}

// update changes the state and stores it when it changed.
func (w *clusterWatcher) update(f func(*appcontext.ClusterState)) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	before := w.state
	f(&w.state)
	changed := w.state != before
	if changed {
		w.state.Updated = w.m.opts.Now().UTC()
	}
	st := w.state
	published := w.published
	w.mu.Unlock()
	// Before it has published, a watcher stores only what it knows makes
	// every resource of the cluster Unknown whatever its bundles say (it
	// cannot reach it, no monitor runs there): never a state that would
	// have its bundles believed before they are stored, nor a guess.
	unbelieved := st.Connectivity == appcontext.Unreachable || st.Monitor != "" && st.Monitor != appcontext.MonitorRunning
	if !changed || !published && !unbelieved {
		return
	}
	if err := w.store(st); err != nil {
		w.log.WithError(err).Error("cannot store cluster state")
	}
}

// store writes the watcher's state on its claim's lease, under its guard.
func (w *clusterWatcher) store(st appcontext.ClusterState) error {
	w.mu.Lock()
	detached := w.detached
	w.mu.Unlock()
	if detached {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st = withMonitor(st)
	err := w.m.opts.Store.PutClusterStateOn(ctx, w.ref, st, w.fence.Lease(), w.fence.Guards()...)
	if errors.Is(err, appcontext.ErrGuard) {
		w.log.Info("cluster state not stored: the cluster is no longer this replica's")
		return nil
	}
	if err == nil {
		w.mu.Lock()
		w.lastStored = &st
		w.mu.Unlock()
	}
	return err
}

// withMonitor says why a state without a monitor state has none.
func withMonitor(st appcontext.ClusterState) appcontext.ClusterState {
	if st.Monitor == "" {
		st.Monitor = appcontext.MonitorNotInstalled
		st.Reason = "no monitor Lease seen yet"
	}
	return st
}

// clientRetry times the attempts to get a cluster's client.
func clientRetry() backoff.Backoff {
	return backoff.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}
}
