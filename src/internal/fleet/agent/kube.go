package agent

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/monitor"
	"github.com/argus-mc/argus/src/internal/rsync"
)

// KubeOptions configures a KubeCluster; Config is required.
type KubeOptions struct {
	// Config reaches the agent's own cluster (its service account, or a
	// kubeconfig given to the agent; never given to the orchestrator).
	Config *rest.Config
	// Monitor, when set, runs the monitor in-process with these options
	// (Config filled in): the agent then reports its state.
	Monitor *monitor.Options
	// FieldValidation is rsync's default; "" means Warn.
	FieldValidation string
	Logger          *logrus.Entry
}

// KubeCluster is the agent's Kubernetes side on a real API server: the
// rsync engine applies the work on a local copy of it, the monitor fills
// the ResourceBundleStates, and an informer on those reports them.
type KubeCluster struct {
	opts   KubeOptions
	log    *logrus.Entry
	client *cluster.Client
	mon    *monitor.Monitor

	mu      sync.Mutex
	ops     []func(ctx context.Context)
	wake    chan struct{}
	engine  *rsync.Engine
	store   *localStore
	labels  map[string][2]string // bundle key → status id, app (for deletions)
	noCRD   atomic.Bool
	running sync.WaitGroup
}

var _ Cluster = (*KubeCluster)(nil)

// NewKubeCluster builds the clients; Run starts the work.
func NewKubeCluster(opts KubeOptions) (*KubeCluster, error) {
	if opts.Config == nil {
		return nil, errors.New("agent: a Kubernetes client configuration is required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	c, err := cluster.NewClient(opts.Config)
	if err != nil {
		return nil, err
	}
	k := &KubeCluster{opts: opts, log: opts.Logger, client: c, wake: make(chan struct{}, 1), labels: map[string][2]string{}}
	if opts.Monitor != nil {
		mo := *opts.Monitor
		mo.Config = opts.Config
		if k.mon, err = monitor.New(mo); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// Client and CloudClient give rsync the agent's own cluster (rsync.Clusters):
// a logical cloud's confinement to its namespace needs credentials the
// orchestrator issues through the cluster, which a pull cluster does not
// give it, so the agent applies every context with its own.
func (k *KubeCluster) Client(context.Context, appcontext.ClusterRef) (*cluster.Client, error) {
	return k.client, nil
}

// CloudClient is Client (see there).
func (k *KubeCluster) CloudClient(ctx context.Context, ref appcontext.ClusterRef, _ cluster.Cloud) (*cluster.Client, error) {
	return k.Client(ctx, ref)
}

// Run runs the monitor, the bundle informer and the work until ctx ends.
func (k *KubeCluster) Run(ctx context.Context, r Reporter) error {
	store := newLocalStore(appcontext.ClusterRef{Provider: "local", Name: "cluster"}, r)
	engine, err := rsync.New(rsync.Options{Contexts: store, Clusters: k, FieldValidation: k.opts.FieldValidation,
		Logger: k.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.engine, k.store = engine, store
	k.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	if k.mon != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := k.mon.Run(ctx); err != nil {
				k.log.WithError(err).Error("monitor stopped")
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		k.watchBundles(ctx, r)
	}()
	k.work(ctx)
	engine.Close() // the actions stop; their progress is in the local copy, which goes with the process
	k.running.Wait()
	return nil
}

// Apply queues w (Cluster).
func (k *KubeCluster) Apply(w Work) { k.enqueue(func(ctx context.Context) { k.apply(ctx, w) }) }

// Forget queues the forgetting of a placement (Cluster).
func (k *KubeCluster) Forget(key WorkKey) {
	k.enqueue(func(context.Context) {
		k.engine.Release(localID(key))
		k.store.remove(key)
	})
}

func (k *KubeCluster) enqueue(op func(ctx context.Context)) {
	k.mu.Lock()
	k.ops = append(k.ops, op)
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// work runs the queued operations in order until ctx ends.
func (k *KubeCluster) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		}
		for {
			k.mu.Lock()
			if len(k.ops) == 0 {
				k.mu.Unlock()
				break
			}
			op := k.ops[0]
			k.ops = k.ops[1:]
			k.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			op(ctx)
		}
	}
}

// apply starts rsync on a placement's new generation: an action on an
// older one is stopped first (what it did is kept: rsync applies only
// what changed since), a deletion preempts anything.
func (k *KubeCluster) apply(ctx context.Context, w Work) {
	id := localID(w.Key)
	k.engine.Release(id)
	isNew := k.store.put(w)
	kind := rsync.WorkUpdate
	switch {
	case w.Delete:
		kind = rsync.WorkDelete
	case isNew && !w.Update && !k.installed(ctx, w): // an installation: Helm's install hooks run
		kind = rsync.WorkInstall
	}
	quiet := k.engine.Run(id, id, kind)
	k.running.Add(1)
	go func() {
		defer k.running.Done()
		select {
		case <-quiet:
			k.store.r.Progress(w.Key, w.Generation, true, false)
		case <-ctx.Done():
		}
	}()
}

// installed reports whether the placement's ResourceBundleState is on the
// cluster: an agent that restarted gets its work again, and what was
// installed before is updated, not installed anew (its install hooks
// would run again).
func (k *KubeCluster) installed(ctx context.Context, w Work) bool {
	_, err := k.client.Dynamic.Resource(v1alpha1.GVR()).Namespace(w.Namespace).Get(ctx, rsync.BundleName(w.Key.App, w.StatusID), metav1.GetOptions{})
	return err == nil
}

// Monitor reports the in-process monitor's state (Cluster).
func (k *KubeCluster) Monitor() (string, string) {
	switch {
	case k.noCRD.Load():
		return appcontext.MonitorNotInstalled, "the ResourceBundleState CRD is not installed"
	case k.mon == nil, k.mon.Ready():
		return appcontext.MonitorRunning, ""
	}
	return appcontext.MonitorNotInstalled, "the monitor has not synced its caches yet"
}

// watchBundles reports every ResourceBundleState labelled with a context
// id, as it changes, and its deletion.
func (k *KubeCluster) watchBundles(ctx context.Context, r Reporter) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "agent-bundles"})
	defer queue.ShutDown()
	inf := dynamicinformer.NewFilteredDynamicInformer(k.client.Dynamic, v1alpha1.GVR(), "", 0, cache.Indexers{},
		func(lo *metav1.ListOptions) { lo.LabelSelector = v1alpha1.LabelContextID }).Informer()
	remember := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		key, err := cache.MetaNamespaceKeyFunc(u)
		if err != nil {
			return
		}
		k.mu.Lock()
		k.labels[key] = [2]string{u.GetLabels()[v1alpha1.LabelContextID], u.GetLabels()[v1alpha1.LabelApp]}
		k.mu.Unlock()
		queue.Add(key)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    remember,
		UpdateFunc: func(_, o any) { remember(o) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(key)
			}
		},
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		k.noCRD.Store(apierrors.IsNotFound(err))
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); <-ctx.Done(); queue.ShutDown() }()
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		k.reportBundle(key, inf, r)
		queue.Done(key)
	}
}

func (k *KubeCluster) reportBundle(key string, inf cache.SharedIndexInformer, r Reporter) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	obj, exists, err := inf.GetStore().GetByKey(key)
	if err != nil {
		return
	}
	k.noCRD.Store(false)
	if !exists {
		k.mu.Lock()
		l, known := k.labels[key]
		delete(k.labels, key)
		k.mu.Unlock()
		if known {
			r.Bundle(Bundle{Namespace: ns, Name: name, StatusID: l[0], App: l[1], Deleted: true})
		}
		return
	}
	u := obj.(*unstructured.Unstructured)
	status, err := json.Marshal(u.Object["status"])
	if err != nil {
		return
	}
	r.Bundle(Bundle{Namespace: ns, Name: name, StatusID: u.GetLabels()[v1alpha1.LabelContextID], App: u.GetLabels()[v1alpha1.LabelApp],
		ResourceVersion: u.GetResourceVersion(), Status: status})
}
