package rsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
)

const fieldManager = "argus"

// Clusters gives rsync a client per cluster, and per cluster and logical
// cloud for contexts deployed in one.
type Clusters interface {
	Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error)
	CloudClient(ctx context.Context, ref appcontext.ClusterRef, cloud cluster.Cloud) (*cluster.Client, error)
}

// Options configures the Engine. Zero values are the documented defaults,
// except Store and Clusters, which are required.
type Options struct {
	Store    *appcontext.Store
	Clusters Clusters
	// Parallelism is how many app/cluster placements are applied at once; 0 means 16.
	Parallelism int
	// BackoffBase and BackoffMax bound the retry delay for an unreachable
	// cluster; 0 means 500ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// NoMatchAttempts is how often a kind the cluster does not serve is
	// retried (a CRD applied just before may still be establishing) before
	// the resource is Failed; 0 means 10.
	NoMatchAttempts int
	// RequestTimeout bounds each request to a cluster, so one that does not
	// answer is retried like one that refuses; 0 means 15s.
	RequestTimeout time.Duration
	Logger         *logrus.Entry
}

// Engine runs rsync actions. It owns every goroutine it starts; Close stops
// them and waits.
type Engine struct {
	opts   Options
	log    *logrus.Entry
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	groups map[string]*run // the last action started per group
}

// run is one action on one group.
type run struct {
	kind   string
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns an Engine.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil || opts.Clusters == nil {
		return nil, errors.New("rsync: Store and Clusters are required")
	}
	if opts.Parallelism == 0 {
		opts.Parallelism = 16
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.NoMatchAttempts == 0 {
		opts.NoMatchAttempts = 10
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Engine{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, groups: map[string]*run{}}, nil
}

// Close cancels every action and waits for them. Their progress is in etcd;
// Resume continues it in the next process.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// Action kinds.
const (
	actionApply  = "apply"
	actionUpdate = "update"
	actionDelete = "delete"
)

// Instantiate applies a new context's resources, after any action in flight
// on its group.
func (e *Engine) Instantiate(group, id string) { e.start(group, actionApply, id, false) }

// Update applies a context's changed resources and deletes those marked
// removed, after any action in flight on its group.
func (e *Engine) Update(group, id string) { e.start(group, actionUpdate, id, false) }

// Terminate cancels the action in flight on the group and deletes the
// context's resources.
func (e *Engine) Terminate(group, id string) { e.start(group, actionDelete, id, true) }

// Stop cancels the action in flight on the group and waits for it; it
// reports whether one was running.
func (e *Engine) Stop(group string) bool {
	r := e.running(group)
	if r == nil {
		return false
	}
	r.cancel()
	<-r.done
	return true
}

// Busy reports whether an action is running on the group.
func (e *Engine) Busy(group string) bool { return e.running(group) != nil }

// running returns the group's action if it has not finished, else nil.
func (e *Engine) running(group string) *run {
	e.mu.Lock()
	r := e.groups[group]
	e.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	default:
		return r
	}
}

func (e *Engine) start(group, kind, id string, preempt bool) {
	e.mu.Lock()
	prev := e.groups[group]
	if preempt && prev != nil {
		prev.cancel()
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r := &run{kind: kind, cancel: cancel, done: make(chan struct{})}
	e.groups[group] = r
	e.mu.Unlock()

	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(r.done)
		defer cancel()
		if prev != nil {
			select { // actions on one group are serialised
			case <-prev.done:
			case <-ctx.Done():
				return
			}
		}
		log := e.log.WithFields(logrus.Fields{"context": id, "action": kind, "group": group})
		var err error
		switch kind {
		case actionApply, actionUpdate:
			err = e.apply(ctx, id, kind == actionUpdate)
		case actionDelete:
			err = e.delete(ctx, id)
		}
		switch {
		case err == nil:
			log.Info("rsync action finished")
		case errors.Is(err, context.Canceled):
			log.Info("rsync action cancelled")
		default:
			log.WithError(err).Warn("rsync action failed")
		}
	}()
}

// Resume restarts the actions an earlier process left unfinished.
func (e *Engine) Resume(ctx context.Context) error {
	list, err := e.opts.Store.List(ctx)
	if err != nil {
		return err
	}
	for _, c := range list {
		switch c.Status.Status {
		case appcontext.Instantiating:
			e.start(c.Meta.Group, actionApply, c.Meta.ID, false)
		case appcontext.Updating:
			e.start(c.Meta.Group, actionUpdate, c.Meta.ID, false)
		case appcontext.Terminating:
			e.start(c.Meta.Group, actionDelete, c.Meta.ID, false)
		default:
			continue
		}
		e.log.WithFields(logrus.Fields{"context": c.Meta.ID, "status": c.Status.Status}).Info("resuming rsync action")
	}
	return nil
}

// ---- apply ----

func (e *Engine) apply(ctx context.Context, id string, update bool) error {
	c, err := e.opts.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	running, done, failed := appcontext.Instantiating, appcontext.Instantiated, appcontext.InstantiateFailed
	if update {
		running, done, failed = appcontext.Updating, appcontext.Updated, appcontext.UpdateFailed
	}
	if c.Status.Status != running {
		if err := e.opts.Store.SetStatus(ctx, id, appcontext.Status{Status: running}); err != nil {
			return err
		}
	}
	anyFailed := e.eachPlacement(ctx, c, func(ctx context.Context, p *appcontext.Placement) bool {
		return e.applyPlacement(ctx, c, p, update)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	final := done
	msg := ""
	if anyFailed {
		final, msg = failed, "one or more resources failed; see their rsync status"
	}
	return e.opts.Store.SetStatus(context.WithoutCancel(ctx), id, appcontext.Status{Status: final, Error: msg})
}

// eachPlacement runs f over the placements, Parallelism at a time, and
// reports whether any reported a failure.
func (e *Engine) eachPlacement(ctx context.Context, c *appcontext.Context, f func(context.Context, *appcontext.Placement) bool) bool {
	sem := make(chan struct{}, e.opts.Parallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	anyFailed := false
	for _, p := range c.Placements {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if f(ctx, p) {
				mu.Lock()
				anyFailed = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return anyFailed
}

// applyPlacement applies one app's resources to one cluster, in order, and
// then its ResourceBundleState. It returns true if any resource Failed.
func (e *Engine) applyPlacement(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, update bool) bool {
	log := e.log.WithFields(logrus.Fields{"context": c.Meta.ID, "app": p.App, "cluster": p.Cluster.String()})
	labels := bundleLabels(c.Meta.StatusID, p.App)
	pending := make([]appcontext.Resource, 0, len(p.Resources))
	var removed []appcontext.Resource
	for _, r := range orderForApply(p.Resources) {
		st := p.StatusOf(r.Key()).Status
		switch {
		case r.Removed:
			if st != appcontext.RsyncDeleted {
				removed = append(removed, r)
			}
		case update || st != appcontext.RsyncApplied:
			pending = append(pending, r)
		}
	}
	anyFailed := false
	var kinds []schema.GroupVersionKind
	seen := map[schema.GroupVersionKind]bool{}
	for _, r := range p.Resources {
		if !r.Removed && !seen[r.GVK] {
			seen[r.GVK] = true
			kinds = append(kinds, r.GVK)
		}
	}
	attempt := 0
	for len(pending) > 0 {
		if ctx.Err() != nil {
			return anyFailed
		}
		r := pending[0]
		status, err := e.applyOne(ctx, c, p, r, labels)
		switch status {
		case appcontext.RsyncApplied, appcontext.RsyncFailed:
			if err != nil {
				log.WithError(err).WithField("resource", r.Key()).Warn("apply failed")
			}
			anyFailed = anyFailed || status == appcontext.RsyncFailed
			e.record(ctx, c.Meta.ID, p, r.Key(), appcontext.ResourceStatus{Status: status, Error: errString(err)})
			pending = pending[1:]
			attempt = 0
		case appcontext.RsyncRetrying:
			// The cluster is unreachable: everything still to do waits for it.
			attempt++
			for _, w := range pending {
				e.record(ctx, c.Meta.ID, p, w.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncRetrying, Error: errString(err), Attempts: attempt})
			}
			log.WithError(err).WithField("attempt", attempt).Info("cluster unreachable; retrying")
			if !e.sleep(ctx, attempt) {
				return anyFailed
			}
		}
	}
	for _, r := range removed {
		if e.deleteWithRetry(ctx, c, p, r) {
			anyFailed = true
		}
	}
	if ctx.Err() == nil {
		e.applyBundle(ctx, c, p, labels, kinds, log)
	}
	return anyFailed
}

// orderForApply puts CRDs first, then Namespaces, then the rest in render order.
func orderForApply(rs []appcontext.Resource) []appcontext.Resource {
	var crds, nss, rest []appcontext.Resource
	for _, r := range rs {
		switch {
		case r.GVK.Kind == "CustomResourceDefinition" && r.GVK.Group == "apiextensions.k8s.io":
			crds = append(crds, r)
		case r.GVK.Kind == "Namespace" && r.GVK.Group == "":
			nss = append(nss, r)
		default:
			rest = append(rest, r)
		}
	}
	return append(append(crds, nss...), rest...)
}

// applyOne applies one resource; it returns Applied, Failed, or Retrying
// when the cluster cannot be reached.
func (e *Engine) applyOne(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource, labels map[string]string) (string, error) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return appcontext.RsyncFailed, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(r.Manifest); err != nil {
		return appcontext.RsyncFailed, fmt.Errorf("decode manifest: %w", err)
	}
	decorate(obj, labels)
	ri, status, err := e.resourceFor(ctx, client, r.GVK, obj, c.Meta.Namespace)
	if err != nil {
		return status, err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return appcontext.RsyncFailed, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	_, err = ri.Patch(rctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue()})
	if err == nil {
		return appcontext.RsyncApplied, nil
	}
	if apierrors.IsNotFound(err) && obj.GetNamespace() != "" {
		// The target namespace does not exist yet: create it, as
		// helm --create-namespace would, and try again.
		if nerr := e.ensureNamespace(rctx, client, obj.GetNamespace()); nerr != nil {
			return classify(ctx, nerr), nerr
		}
		if _, err = ri.Patch(rctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue()}); err == nil {
			return appcontext.RsyncApplied, nil
		}
	}
	return classify(ctx, err), err
}

// resourceFor maps the kind and picks the namespace: a namespaced object
// without one goes to the context's namespace.
func (e *Engine) resourceFor(ctx context.Context, client *cluster.Client, gvk schema.GroupVersionKind, obj *unstructured.Unstructured, defaultNS string) (dynamic.ResourceInterface, string, error) {
	var mapping *meta.RESTMapping
	var err error
	for attempt := 1; ; attempt++ {
		mapping, err = client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			break
		}
		if !meta.IsNoMatchError(err) {
			// Discovery failed: the cluster is unreachable or unwell.
			return nil, appcontext.RsyncRetrying, fmt.Errorf("discover %s: %w", gvk.Kind, err)
		}
		client.Mapper.Reset()
		if attempt >= e.opts.NoMatchAttempts {
			return nil, appcontext.RsyncFailed, fmt.Errorf("kind %s is not served by the cluster", gvk)
		}
		if !e.sleep(ctx, 1) {
			return nil, appcontext.RsyncRetrying, ctx.Err()
		}
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		obj.SetNamespace("")
		return client.Dynamic.Resource(mapping.Resource), "", nil
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(defaultNS)
	}
	return client.Dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace()), "", nil
}

func (e *Engine) ensureNamespace(ctx context.Context, client *cluster.Client, ns string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	data, _ := obj.MarshalJSON()
	_, err := client.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Patch(ctx, ns, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue()})
	return err
}

// applyBundle applies the app's ResourceBundleState. The CRD belongs to the
// monitor's manifests; without it the deployment still succeeds, and the
// status engine reports the monitor NotInstalled.
func (e *Engine) applyBundle(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, labels map[string]string, kinds []schema.GroupVersionKind, log *logrus.Entry) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return
	}
	kindList := make([]any, 0, len(kinds))
	for _, k := range kinds {
		kindList = append(kindList, map[string]any{"group": k.Group, "version": k.Version, "kind": k.Kind})
	}
	rbs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": v1alpha1.Kind,
		"metadata": map[string]any{
			"name": BundleName(p.App, c.Meta.StatusID), "namespace": c.Meta.Namespace,
			"labels": map[string]any{v1alpha1.LabelContextID: c.Meta.StatusID, v1alpha1.LabelApp: p.App},
		},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{v1alpha1.LabelDeploymentID: labels[v1alpha1.LabelDeploymentID]}},
			"kinds":    kindList,
		},
	}}
	// The CRD is the monitor's, never applied just before: one rediscovery
	// tells whether it is installed, without resourceFor's patience.
	if _, err := client.Mapper.RESTMapping(v1alpha1.GVK().GroupKind(), v1alpha1.Version); meta.IsNoMatchError(err) {
		client.Mapper.Reset()
		if _, err := client.Mapper.RESTMapping(v1alpha1.GVK().GroupKind(), v1alpha1.Version); meta.IsNoMatchError(err) {
			log.Warn("the ResourceBundleState CRD is not installed (is the monitor?); the deployment goes on without it")
			return
		}
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		ri, status, err := e.resourceFor(ctx, client, v1alpha1.GVK(), rbs, c.Meta.Namespace)
		if err == nil {
			data, _ := rbs.MarshalJSON()
			_, err = ri.Patch(ctx, rbs.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue()})
			status = classify(ctx, err)
		}
		if err == nil {
			return
		}
		if status != appcontext.RsyncRetrying {
			log.WithError(err).Warn("cannot apply the ResourceBundleState (is the monitor installed?)")
			return
		}
		if !e.sleep(ctx, attempt) {
			return
		}
	}
}

// ---- delete ----

func (e *Engine) delete(ctx context.Context, id string) error {
	c, err := e.opts.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if c.Status.Status != appcontext.Terminating {
		if err := e.opts.Store.SetStatus(ctx, id, appcontext.Status{Status: appcontext.Terminating}); err != nil {
			return err
		}
	}
	anyFailed := e.eachPlacement(ctx, c, func(ctx context.Context, p *appcontext.Placement) bool {
		e.deleteBundle(ctx, c, p)
		failed := false
		rs := orderForApply(p.Resources)
		for i := len(rs) - 1; i >= 0 && ctx.Err() == nil; i-- {
			if p.StatusOf(rs[i].Key()).Status == appcontext.RsyncDeleted {
				continue
			}
			if e.deleteWithRetry(ctx, c, p, rs[i]) {
				failed = true
			}
		}
		return failed
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	final, msg := appcontext.Terminated, ""
	if anyFailed {
		final, msg = appcontext.TerminateFailed, "one or more resources could not be deleted; see their rsync status"
	}
	return e.opts.Store.SetStatus(context.WithoutCancel(ctx), id, appcontext.Status{Status: final, Error: msg})
}

// deleteWithRetry deletes one resource, retrying while the cluster is
// unreachable. It returns true if the resource Failed.
func (e *Engine) deleteWithRetry(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) bool {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		status, err := e.deleteOne(ctx, c, p, r)
		if status != appcontext.RsyncRetrying {
			e.record(ctx, c.Meta.ID, p, r.Key(), appcontext.ResourceStatus{Status: status, Error: errString(err)})
			return status == appcontext.RsyncFailed
		}
		e.record(ctx, c.Meta.ID, p, r.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncRetrying, Error: errString(err), Attempts: attempt})
		if !e.sleep(ctx, attempt) {
			break
		}
	}
	return false
}

func (e *Engine) deleteOne(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) (string, error) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return appcontext.RsyncFailed, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(r.Manifest); err != nil {
		return appcontext.RsyncFailed, err
	}
	ri, status, err := e.resourceFor(ctx, client, r.GVK, obj, c.Meta.Namespace)
	if err != nil {
		if status == appcontext.RsyncFailed {
			return appcontext.RsyncDeleted, nil // the kind is gone, so is the object
		}
		return status, err
	}
	policy := metav1.DeletePropagationBackground
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	err = ri.Delete(rctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy})
	if err == nil || apierrors.IsNotFound(err) {
		return appcontext.RsyncDeleted, nil
	}
	return classify(ctx, err), err
}

func (e *Engine) deleteBundle(ctx context.Context, c *appcontext.Context, p *appcontext.Placement) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := client.Dynamic.Resource(v1alpha1.GVR()).Namespace(c.Meta.Namespace).Delete(ctx, BundleName(p.App, c.Meta.StatusID), metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) || classify(ctx, err) != appcontext.RsyncRetrying {
			return
		}
		if !e.sleep(ctx, attempt) {
			return
		}
	}
}

// ---- helpers ----

func (e *Engine) record(ctx context.Context, id string, p *appcontext.Placement, key string, st appcontext.ResourceStatus) {
	// Written even when the action is being cancelled: what was done stays known.
	if err := e.opts.Store.SetResourceStatus(context.WithoutCancel(ctx), id, p.App, p.Cluster, key, st); err != nil {
		e.log.WithError(err).WithField("resource", key).Error("cannot record rsync status")
	}
}

// sleep waits the backoff for attempt (exponential, capped, ±20% jitter);
// it returns false if ctx ended first.
func (e *Engine) sleep(ctx context.Context, attempt int) bool {
	d := e.opts.BackoffBase << min(attempt-1, 20)
	if d > e.opts.BackoffMax || d <= 0 {
		d = e.opts.BackoffMax
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	return backoff.Sleep(ctx, d)
}

// classify says whether an error means "try again later" (the cluster is
// unreachable, overloaded or timing out) or a final failure.
func classify(ctx context.Context, err error) string {
	if err == nil {
		return appcontext.RsyncApplied
	}
	if ctx.Err() != nil {
		return appcontext.RsyncRetrying
	}
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return appcontext.RsyncRetrying
	case errors.As(err, &netErr), errors.As(err, &urlErr), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded):
		return appcontext.RsyncRetrying
	}
	return appcontext.RsyncFailed
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func ptrTrue() *bool { b := true; return &b }
