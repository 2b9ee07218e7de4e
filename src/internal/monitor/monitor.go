package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

const (
	// byDeploymentID indexes objects by their emco/deployment-id label and
	// bundles by the value their selector requires ("*" when it requires none).
	byDeploymentID = "deploymentID"
	anyDeployment  = "*"
	// configKey is the ConfigMap key listing extra kinds.
	configKey = "extra-gvks"
	// kindSyncTimeout bounds the first list of a kind before it is reported
	// unwatchable (e.g. forbidden by RBAC); it is retried with backoff.
	kindSyncTimeout = 30 * time.Second
	fieldManager    = "argus-monitor"
)

// Monitor keeps the ResourceBundleStates of one cluster current.
type Monitor struct {
	opts    Options
	log     *logrus.Entry
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	metrics *metrics

	bundleInformer cache.SharedIndexInformer
	configFactory  informers.SharedInformerFactory
	configInformer cache.SharedIndexInformer
	bundles        workqueue.TypedRateLimitingInterface[string]
	kinds          workqueue.TypedRateLimitingInterface[schema.GroupVersionKind]

	runCtx context.Context
	wg     sync.WaitGroup // every goroutine Run starts

	mu          sync.RWMutex
	watches     map[schema.GroupVersionKind]*kindWatch
	failures    map[schema.GroupVersionKind]string
	configKinds []schema.GroupVersionKind
	pacer       *pacer

	ready atomic.Bool
}

// kindWatch is one running informer.
type kindWatch struct {
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	synced   atomic.Bool
	lastErr  atomic.Value // string: the reflector's last list/watch error
}

// New builds a Monitor; Run starts it.
func New(opts Options) (*Monitor, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("monitor: dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("monitor: client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("monitor: discovery client: %w", err)
	}
	m := &Monitor{
		opts:     opts,
		log:      opts.Logger,
		dyn:      dyn,
		kube:     kube,
		mapper:   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		watches:  map[schema.GroupVersionKind]*kindWatch{},
		failures: map[schema.GroupVersionKind]string{},
		pacer:    newPacer(opts.CoalesceWindow, opts.MinWriteInterval, clock.RealClock{}),
		bundles: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bundles"}),
		kinds: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[schema.GroupVersionKind](time.Second, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[schema.GroupVersionKind]{Name: "kinds"}),
	}

	m.bundleInformer = dynamicinformer.NewFilteredDynamicInformer(dyn, v1alpha1.GVR(), opts.Namespace, 0,
		cache.Indexers{byDeploymentID: bundleIndex}, nil).Informer()
	if _, err := m.bundleInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.onBundle,
		UpdateFunc: func(_, obj any) { m.onBundle(obj) },
		DeleteFunc: m.onBundleDeleted,
	}); err != nil {
		return nil, err
	}

	if err := m.bundleInformer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		m.log.WithError(err).Warn("cannot list or watch ResourceBundleStates; is the CRD installed (deployments/kubernetes/monitor)?")
	}); err != nil {
		return nil, err
	}

	m.configFactory = informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithNamespace(opts.LeaseNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.ConfigMapName).String()
		}))
	m.configInformer = m.configFactory.Core().V1().ConfigMaps().Informer()
	if _, err := m.configInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.onConfig() },
		UpdateFunc: func(any, any) { m.onConfig() },
		DeleteFunc: func(any) { m.onConfig() },
	}); err != nil {
		return nil, err
	}

	if m.metrics, err = newMetrics(opts.Registerer, m); err != nil {
		return nil, fmt.Errorf("monitor: metrics: %w", err)
	}
	return m, nil
}

// Ready reports whether the monitor has synced its bundles and built-in kinds.
func (m *Monitor) Ready() bool { return m.ready.Load() }

// Run starts the informers, workers and heartbeat, and blocks until ctx
// ends; then it stops them all and waits for them.
func (m *Monitor) Run(ctx context.Context) error {
	m.runCtx = ctx
	defer m.wg.Wait()
	defer m.kinds.ShutDown()
	defer m.bundles.ShutDown()
	defer m.configFactory.Shutdown()

	m.goOwned(func() { m.bundleInformer.Run(ctx.Done()) })
	m.configFactory.Start(ctx.Done())
	m.log.Info("waiting for ResourceBundleState and ConfigMap caches")
	if !cache.WaitForCacheSync(ctx.Done(), m.bundleInformer.HasSynced, m.configInformer.HasSynced) {
		return ctx.Err()
	}
	m.onConfig()
	m.enqueueWantedKinds()

	m.goOwned(func() {
		for m.processNextKind(ctx) {
		}
	})
	for range m.opts.Workers {
		m.goOwned(func() {
			for m.processNextBundle(ctx) {
			}
		})
	}
	m.goOwned(func() { m.heartbeat(ctx) })
	if m.opts.Namespace != "" {
		// Bundles elsewhere are invisible here, so nothing else can say it.
		m.log.WithField("namespace", m.opts.Namespace).Warn("watching one namespace only: ResourceBundleStates and namespaced objects in other namespaces are not tracked")
	}
	m.log.WithField("workers", m.opts.Workers).Info("monitor running")
	<-ctx.Done()
	m.log.Info("monitor stopping")
	return nil
}

func (m *Monitor) goOwned(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// ---- event handlers: they only enqueue keys ----

func (m *Monitor) onBundle(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	for _, gvk := range bundleKinds(u) {
		m.kinds.Add(gvk)
	}
	m.enqueueBundle(u)
}

func (m *Monitor) onBundleDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		m.pacer.forget(key)
		// A sync of it in flight records its pacing again; the sync this
		// queues runs after that one and finds it gone.
		m.bundles.Add(key)
	}
	// Kinds only this bundle wanted may now be stopped.
	m.mu.RLock()
	for gvk := range m.watches {
		m.kinds.Add(gvk)
	}
	m.mu.RUnlock()
}

func (m *Monitor) onConfig() {
	var kinds []schema.GroupVersionKind
	if obj, ok, _ := m.configInformer.GetStore().GetByKey(m.opts.LeaseNamespace + "/" + m.opts.ConfigMapName); ok {
		cm := obj.(*corev1.ConfigMap)
		parsed, err := ParseGVKs(cm.Data[configKey])
		if err != nil {
			// A bad edit must not take kinds away; keep the last good list.
			m.log.WithError(err).WithField("configmap", m.opts.ConfigMapName).Error("ignoring invalid extra-gvks")
			return
		}
		kinds = parsed
	}
	m.mu.Lock()
	previous := m.configKinds
	m.configKinds = kinds
	m.mu.Unlock()
	for _, gvk := range append(previous, kinds...) {
		m.kinds.Add(gvk)
	}
	m.enqueueAllBundles()
}

// onObject enqueues every bundle whose selector matches the object.
func (m *Monitor) onObject(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	set := labels.Set(u.GetLabels())
	for _, b := range m.bundlesFor(set[v1alpha1.LabelDeploymentID]) {
		if sel := bundleSelector(b); sel.Matches(set) {
			m.enqueueBundle(b)
		}
	}
}

func (m *Monitor) onObjectUpdate(oldObj, newObj any) {
	// A changed deployment-id moves the object from one bundle to another.
	if o, ok := oldObj.(*unstructured.Unstructured); ok {
		if n, ok := newObj.(*unstructured.Unstructured); ok && !labels.Equals(o.GetLabels(), n.GetLabels()) {
			m.onObject(oldObj)
		}
	}
	m.onObject(newObj)
}

func (m *Monitor) bundlesFor(deploymentID string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, v := range []string{deploymentID, anyDeployment} {
		items, _ := m.bundleInformer.GetIndexer().ByIndex(byDeploymentID, v)
		for _, it := range items {
			out = append(out, it.(*unstructured.Unstructured))
		}
	}
	return out
}

// enqueueBundle schedules a sync: at once after a quiet window, else at the
// end of the window (see pacer); events arriving meanwhile join it (the
// delaying queue keeps one entry per key, at its earliest time).
func (m *Monitor) enqueueBundle(b *unstructured.Unstructured) {
	if key, err := cache.MetaNamespaceKeyFunc(b); err == nil {
		m.enqueueKey(key)
	}
}

func (m *Monitor) enqueueKey(key string) {
	if due := m.pacer.due(key); due > 0 {
		m.bundles.AddAfter(key, due)
		return
	}
	m.bundles.Add(key)
}

func (m *Monitor) enqueueAllBundles() {
	for _, key := range m.bundleInformer.GetStore().ListKeys() {
		m.enqueueKey(key)
	}
}

// ---- kinds ----

// baseKinds are the kinds every bundle is built from: the built-in ones and
// the extra ones from the flag and the ConfigMap.
func (m *Monitor) baseKinds() map[schema.GroupVersionKind]bool {
	want := map[schema.GroupVersionKind]bool{}
	for gvk := range builtinKinds() {
		want[gvk] = true
	}
	for _, gvk := range m.opts.ExtraGVKs {
		want[gvk] = true
	}
	m.mu.RLock()
	for _, gvk := range m.configKinds {
		want[gvk] = true
	}
	m.mu.RUnlock()
	return want
}

// wantedKinds is every kind some bundle or configuration asks for.
func (m *Monitor) wantedKinds() map[schema.GroupVersionKind]bool {
	want := m.baseKinds()
	for _, obj := range m.bundleInformer.GetStore().List() {
		for _, gvk := range bundleKinds(obj.(*unstructured.Unstructured)) {
			want[gvk] = true
		}
	}
	delete(want, v1alpha1.GVK())
	return want
}

func (m *Monitor) enqueueWantedKinds() {
	for gvk := range m.wantedKinds() {
		m.kinds.Add(gvk)
	}
}

func (m *Monitor) processNextKind(ctx context.Context) bool {
	gvk, shutdown := m.kinds.Get()
	if shutdown {
		return false
	}
	defer m.kinds.Done(gvk)
	if ctx.Err() != nil {
		return false // stopping (see processNextBundle)
	}
	if err := m.syncKind(ctx, gvk); err != nil {
		m.log.WithError(err).WithField("kind", formatGVK(gvk)).Warn("cannot watch kind; retrying")
		m.kinds.AddRateLimited(gvk)
		return true
	}
	m.kinds.Forget(gvk)
	return true
}

// syncKind starts an informer for a wanted kind, or stops one no longer wanted.
func (m *Monitor) syncKind(ctx context.Context, gvk schema.GroupVersionKind) error {
	if !m.wantedKinds()[gvk] {
		m.mu.Lock()
		if w, ok := m.watches[gvk]; ok {
			w.cancel()
			delete(m.watches, gvk)
			m.log.WithField("kind", formatGVK(gvk)).Info("stopped watching kind")
		}
		delete(m.failures, gvk)
		m.mu.Unlock()
		return nil
	}
	m.mu.RLock()
	_, running := m.watches[gvk]
	m.mu.RUnlock()
	if running {
		return nil
	}
	mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		m.mapper.Reset() // a CRD may have been installed since discovery was cached
		mapping, err = m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		reason := "kind is not served by the API server"
		if !meta.IsNoMatchError(err) {
			reason = "cannot discover kind: " + err.Error()
		}
		m.setFailure(gvk, reason)
		return fmt.Errorf("%s: %w", reason, err)
	}
	ns := ""
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns = m.opts.Namespace
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(m.dyn, mapping.Resource, ns, 0,
		cache.Indexers{byDeploymentID: objectIndex},
		func(lo *metav1.ListOptions) { lo.LabelSelector = v1alpha1.LabelDeploymentID }).Informer()
	w := &kindWatch{gvr: mapping.Resource, informer: inf}
	if err := inf.SetTransform(stripForCache); err != nil {
		return err
	}
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { w.lastErr.Store(err.Error()) }); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: m.onObject, UpdateFunc: m.onObjectUpdate, DeleteFunc: m.onObject,
	}); err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(m.runCtx)
	w.cancel = cancel
	m.mu.Lock()
	m.watches[gvk] = w
	m.mu.Unlock()
	m.goOwned(func() { inf.Run(kctx.Done()) })
	m.goOwned(func() { m.awaitSync(kctx, gvk, w) })
	m.log.WithFields(logrus.Fields{"kind": formatGVK(gvk), "resource": mapping.Resource.String()}).Info("watching kind")
	return nil
}

// awaitSync marks a kind synced once its first list completes, or reports it
// unwatchable (and retries it) when that takes too long.
func (m *Monitor) awaitSync(ctx context.Context, gvk schema.GroupVersionKind, w *kindWatch) {
	tctx, cancel := context.WithTimeout(ctx, kindSyncTimeout)
	defer cancel()
	if cache.WaitForCacheSync(tctx.Done(), w.informer.HasSynced) {
		w.synced.Store(true)
		m.mu.Lock()
		delete(m.failures, gvk)
		m.mu.Unlock()
		m.updateReady()
		m.enqueueAllBundles()
		return
	}
	if ctx.Err() != nil {
		return // stopped on purpose
	}
	reason := fmt.Sprintf("cannot list %s", w.gvr.Resource)
	if e, _ := w.lastErr.Load().(string); e != "" {
		reason += ": " + e
	}
	w.cancel()
	m.mu.Lock()
	if m.watches[gvk] == w {
		delete(m.watches, gvk)
	}
	m.mu.Unlock()
	m.setFailure(gvk, reason)
	m.kinds.AddRateLimited(gvk)
}

func (m *Monitor) setFailure(gvk schema.GroupVersionKind, reason string) {
	m.mu.Lock()
	changed := m.failures[gvk] != reason
	m.failures[gvk] = reason
	m.mu.Unlock()
	if changed {
		m.updateReady()
		m.enqueueAllBundles()
	}
}

func (m *Monitor) updateReady() {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for gvk := range builtinKinds() {
		w, ok := m.watches[gvk]
		if _, failed := m.failures[gvk]; !failed && (!ok || !w.synced.Load()) {
			return
		}
	}
	m.ready.Store(true)
}

func (m *Monitor) unwatched() map[schema.GroupVersionKind]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[schema.GroupVersionKind]string, len(m.failures))
	for k, v := range m.failures {
		out[k] = v
	}
	return out
}

func (m *Monitor) objectsTracked() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	for _, w := range m.watches {
		n += len(w.informer.GetStore().ListKeys())
	}
	return n
}

// ---- bundles ----

func (m *Monitor) processNextBundle(ctx context.Context) bool {
	key, shutdown := m.bundles.Get()
	if shutdown {
		return false
	}
	defer m.bundles.Done(key)
	if ctx.Err() != nil {
		// Stopping: a shut-down queue still hands out what it holds, and
		// rebuilding a large bundle only to fail its write held a stop up.
		return false
	}
	start := time.Now()
	err := m.syncBundle(ctx, key)
	m.metrics.syncs.Observe(time.Since(start).Seconds())
	if err != nil {
		m.log.WithError(err).WithField("bundle", key).Debug("sync failed; retrying")
		m.bundles.AddRateLimited(key)
		return true
	}
	m.bundles.Forget(key)
	return true
}

var errConflict = errors.New("bundle changed since it was read")

// syncBundle rebuilds one bundle's status from the caches and writes it if
// it changed.
func (m *Monitor) syncBundle(ctx context.Context, key string) error {
	obj, exists, err := m.bundleInformer.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		m.pacer.forget(key)
		return nil
	}
	m.pacer.syncing(key)
	b := obj.(*unstructured.Unstructured)
	sel := bundleSelector(b)
	value := requiredDeploymentID(b)

	var objs []*unstructured.Unstructured
	var unwatched []v1alpha1.KindCondition
	kinds := m.bundleWantedKinds(b)
	m.mu.RLock()
	for _, gvk := range kinds {
		if reason, failed := m.failures[gvk]; failed {
			unwatched = append(unwatched, v1alpha1.KindCondition{GroupVersionKind: apiGVK(gvk), Reason: reason})
			continue
		}
		w, ok := m.watches[gvk]
		if !ok || !w.synced.Load() {
			m.mu.RUnlock()
			return nil // its sync will enqueue every bundle
		}
		var items []any
		if value != anyDeployment {
			items, _ = w.informer.GetIndexer().ByIndex(byDeploymentID, value)
		} else {
			items = w.informer.GetStore().List()
		}
		for _, it := range items {
			u := it.(*unstructured.Unstructured)
			if sel.Matches(labels.Set(u.GetLabels())) {
				objs = append(objs, u)
			}
		}
	}
	m.mu.RUnlock()

	status, err := buildStatus(objs, unwatched, b.GetGeneration(), m.opts.MaxStatusBytes)
	if err != nil {
		return err
	}
	if same, err := sameStatus(b, status); err != nil || same {
		return err
	}
	if wait := m.pacer.writeWait(key); wait > 0 {
		m.bundles.AddAfter(key, wait)
		return nil
	}
	return m.writeStatus(ctx, b, key, status)
}

func (m *Monitor) writeStatus(ctx context.Context, b *unstructured.Unstructured, key string, status v1alpha1.ResourceBundleStateStatus) error {
	// The cached resourceVersion is a precondition: if the bundle moved on,
	// the write is refused and the sync runs again from the newer copy.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": b.GetResourceVersion()},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = m.dyn.Resource(v1alpha1.GVR()).Namespace(b.GetNamespace()).Patch(ctx, b.GetName(),
		types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		m.metrics.conflicts.Inc()
		return errConflict
	case err != nil:
		m.metrics.errors.Inc()
		m.log.WithError(err).WithField("bundle", key).Warn("status write failed")
		return err
	}
	m.metrics.writes.Inc()
	if status.Trimmed {
		m.metrics.trimmed.Inc()
	}
	m.pacer.wrote(key)
	m.log.WithFields(logrus.Fields{"bundle": key, "resources": status.ResourceCount, "ready": status.Ready}).Debug("status written")
	return nil
}

// bundleWantedKinds is what one bundle is built from: the built-in and extra
// kinds plus its own spec.kinds, in a stable order.
func (m *Monitor) bundleWantedKinds(b *unstructured.Unstructured) []schema.GroupVersionKind {
	set := m.baseKinds()
	for _, gvk := range bundleKinds(b) {
		set[gvk] = true
	}
	delete(set, v1alpha1.GVK())
	out := make([]schema.GroupVersionKind, 0, len(set))
	for gvk := range set {
		out = append(out, gvk)
	}
	sortGVKs(out)
	return out
}

// sameStatus reports whether writing status would leave the bundle as it
// is: the current status with status merge-patched onto it, as the API
// server does, compared as canonical JSON (key order and number types do
// not matter). A merge patch drops nulls (a pod condition's lastProbeTime),
// so comparing status itself would find a difference in almost every
// bundle, and rewrite it after every write. Every field and list is written
// whole, so the patch leaves no stale key behind that this would miss.
func sameStatus(b *unstructured.Unstructured, status v1alpha1.ResourceBundleStateStatus) (bool, error) {
	current, found := b.Object["status"]
	if !found {
		return false, nil
	}
	have, err := json.Marshal(current)
	if err != nil {
		return false, err
	}
	patch, err := json.Marshal(status)
	if err != nil {
		return false, err
	}
	merged, err := jsonpatch.MergePatch(have, patch)
	if err != nil {
		return false, err
	}
	var generic any
	if err := json.Unmarshal(merged, &generic); err != nil {
		return false, err
	}
	want, err := json.Marshal(generic)
	if err != nil {
		return false, err
	}
	return bytes.Equal(have, want), nil
}

// ---- helpers over unstructured bundles and objects ----

func bundleSpec(b *unstructured.Unstructured) v1alpha1.ResourceBundleStateSpec {
	var spec v1alpha1.ResourceBundleStateSpec
	if raw, ok := b.Object["spec"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec)
	}
	return spec
}

// bundleSelector is the bundle's label selector. A missing or empty one
// selects nothing: a bundle never claims every labelled object by accident.
func bundleSelector(b *unstructured.Unstructured) labels.Selector {
	spec := bundleSpec(b)
	if spec.Selector == nil || (len(spec.Selector.MatchLabels) == 0 && len(spec.Selector.MatchExpressions) == 0) {
		return labels.Nothing()
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

func requiredDeploymentID(b *unstructured.Unstructured) string {
	if s := bundleSpec(b).Selector; s != nil {
		if v, ok := s.MatchLabels[v1alpha1.LabelDeploymentID]; ok {
			return v
		}
	}
	return anyDeployment
}

func bundleKinds(b *unstructured.Unstructured) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, k := range bundleSpec(b).Kinds {
		gvk := schemaGVK(k)
		if gvk != v1alpha1.GVK() && gvk.Version != "" && gvk.Kind != "" {
			out = append(out, gvk)
		}
	}
	return out
}

func bundleIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	return []string{requiredDeploymentID(u)}, nil
}

func objectIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if v, ok := u.GetLabels()[v1alpha1.LabelDeploymentID]; ok {
		return []string{v}, nil
	}
	return nil, nil
}

// stripForCache drops what the monitor never reports before an object is
// cached: managed fields, and a Secret's data. What the orchestrator needs
// of the managed fields — the hash of the fields Argus applies — is
// computed first and kept beside the object (hashKey).
func stripForCache(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	if h := syncstate.Hash(u.Object); h != "" {
		u.Object[hashKey] = h
	}
	u.SetManagedFields(nil)
	if u.GetKind() == "Secret" && u.GroupVersionKind().Group == "" {
		delete(u.Object, "data")
		delete(u.Object, "stringData")
	}
	return u, nil
}
