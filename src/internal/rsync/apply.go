package rsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
)

// apply applies a context's resources: every placement at once, each
// cluster's requests bounded by ClusterParallelism, each placement's
// resources in order. It ends when every resource is Applied or Failed;
// Retrying and Waiting resources are tried again until then.
func (e *Engine) apply(ctx context.Context, id string, update bool, log *logrus.Entry) error {
	c, err := e.opts.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	names := applyNames
	if update {
		names = updateNames
	}
	if c.Status.Status != names.running {
		if err := e.opts.Store.SetStatus(ctx, id, appcontext.Status{Status: names.running}); err != nil {
			return err
		}
	}
	rec := newRecorder(e.opts.Store, c, names, log)
	mode := c.Meta.FieldValidation
	if mode == "" {
		mode = e.opts.FieldValidation
	}
	var first, all sync.WaitGroup
	for _, p := range c.Placements {
		first.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			pa := &placementApply{e: e, c: c, p: p, rec: rec, mode: mode, firstDone: first.Done,
				log: log.WithFields(logrus.Fields{"app": p.App, "cluster": p.Cluster.String()})}
			pa.run(ctx)
		}()
	}
	passDone := make(chan struct{})
	go func() { first.Wait(); close(passDone) }()
	select {
	case <-passDone:
		rec.firstPassDone()
	case <-ctx.Done():
	}
	all.Wait()
	<-passDone
	rec.finish(ctx.Err() != nil)
	return ctx.Err()
}

// placementApply applies one app's resources to one cluster.
type placementApply struct {
	e         *Engine
	c         *appcontext.Context
	p         *appcontext.Placement
	rec       *recorder
	mode      string
	log       *logrus.Entry
	firstDone func()
}

// outcome is one attempt's result for one resource.
type outcome struct {
	class    class
	err      error
	warnings []string
}

func (pa *placementApply) run(ctx context.Context) {
	firstDone := sync.OnceFunc(pa.firstDone)
	defer firstDone()
	p := pa.p
	labels := bundleLabels(pa.c.Meta.StatusID, p.App)
	// What to apply: every resource not Applied with its current manifest.
	var todo, removed []appcontext.Resource
	for _, r := range orderForApply(p.Resources) {
		st := p.StatusOf(r.Key())
		switch {
		case r.Removed:
			if st.Status != appcontext.RsyncDeleted {
				removed = append(removed, r)
			}
		case st.Status != appcontext.RsyncApplied || st.Manifest == "" || r.ManifestRef == nil || st.Manifest != r.ManifestRef.SHA256:
			todo = append(todo, r)
		}
	}
	classes := map[string]class{}
	transientAttempt, waitAttempt := 0, 0
	retryFailed := false
	bundled := false
	for pass := 1; ; pass++ {
		var changed <-chan struct{}
		release := func() {}
		if pass > 1 && needsChanges(classes) {
			// Subscribed before trying, so a change during the pass is not missed.
			client, _ := pa.e.opts.Clusters.Client(ctx, p.Cluster)
			changed, release = pa.e.subscribe(p.Cluster, client)
		}
		next := todo[:0:0]
		for i, r := range todo {
			if ctx.Err() != nil {
				release()
				return
			}
			if pass > 1 && classes[r.Key()] == permanent && !retryFailed {
				next = append(next, r)
				continue
			}
			o := pa.applyOne(ctx, r, labels)
			if ctx.Err() != nil {
				release()
				return
			}
			classes[r.Key()] = o.class
			st := appcontext.ResourceStatus{Status: o.class.status(), Error: reason(o.class, o.err), Warnings: o.warnings}
			if o.class == done && r.ManifestRef != nil {
				st.Manifest = r.ManifestRef.SHA256
			}
			if o.class == transient {
				st.Attempts = transientAttempt + 1
			}
			pa.rec.record(p, r.Key(), st)
			if o.class != done {
				next = append(next, r)
			}
			if o.class == transient && unreachable(o.err) {
				// The cluster cannot be reached: all that is left waits for it.
				for _, w := range todo[i+1:] {
					classes[w.Key()] = transient
					pa.rec.record(p, w.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncRetrying, Error: st.Error, Attempts: st.Attempts})
					next = append(next, w)
				}
				pa.log.WithError(o.err).WithField("attempt", st.Attempts).Info("cluster unreachable; retrying")
				break
			}
			if o.class != done {
				pa.log.WithError(o.err).WithFields(logrus.Fields{"resource": r.Key(), "status": st.Status}).Info("resource not applied")
			}
		}
		todo = next
		if pass == 1 {
			for _, r := range removed {
				if st, err := pa.e.deleteWithRetry(ctx, pa.c, p, r); ctx.Err() == nil {
					pa.rec.record(p, r.Key(), appcontext.ResourceStatus{Status: st, Error: reason(classify(ctx, err), err)})
				}
			}
		}
		if !bundled && ctx.Err() == nil {
			bundled = pa.applyBundle(ctx, labels)
		}
		if pass == 1 {
			firstDone()
		}
		if !needsRetry(classes, todo) {
			release()
			return
		}
		// Wait: transient errors back off; Waiting resources are woken by a
		// change of the cluster's API, or re-checked on a slower timer.
		var timer time.Duration
		hasTransient, hasWaiting := anyClass(classes, todo, transient), anyClass(classes, todo, waiting)
		if hasTransient {
			transientAttempt++
			timer = backoffFor(pa.e.opts.BackoffBase, pa.e.opts.BackoffMax, transientAttempt)
		}
		if hasWaiting {
			waitAttempt++
			if w := backoffFor(pa.e.opts.WaitBase, pa.e.opts.WaitMax, waitAttempt); timer == 0 || w < timer {
				timer = w
			}
		}
		if changed == nil && hasWaiting {
			client, _ := pa.e.opts.Clusters.Client(ctx, p.Cluster)
			changed, release = pa.e.subscribe(p.Cluster, client)
		}
		retryFailed = false
		t := time.NewTimer(timer)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
			// The cluster's API changed: waiting resources are worth trying at
			// once, and so are failed ones (a new CRD version may accept them).
			retryFailed, waitAttempt = true, 0
		}
		t.Stop()
		release()
		if ctx.Err() != nil {
			return
		}
	}
}

// needsChanges: something on this placement waits for the cluster's API.
func needsChanges(classes map[string]class) bool {
	for _, c := range classes {
		if c == waiting {
			return true
		}
	}
	return false
}

// needsRetry: some resource still to do is Retrying or Waiting. Failed
// ones alone do not keep the action alive.
func needsRetry(classes map[string]class, todo []appcontext.Resource) bool {
	return anyClass(classes, todo, transient) || anyClass(classes, todo, waiting)
}

func anyClass(classes map[string]class, todo []appcontext.Resource, c class) bool {
	for _, r := range todo {
		if classes[r.Key()] == c {
			return true
		}
	}
	return false
}

// applyOne applies one resource with server-side apply.
func (pa *placementApply) applyOne(ctx context.Context, r appcontext.Resource, labels map[string]string) outcome {
	client, err := pa.e.opts.Clusters.Client(ctx, pa.p.Cluster)
	if err != nil {
		err = fmt.Errorf("cluster %s: %w", pa.p.Cluster, err)
		return outcome{class: classify(ctx, err), err: err}
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(r.Manifest); err != nil {
		return outcome{class: permanent, err: fmt.Errorf("decode manifest: %w", err)}
	}
	decorate(obj, labels)
	cs := pa.e.cluster(pa.p.Cluster)
	ri, err := pa.e.resourceFor(cs, client, r.GVK, obj, pa.c.Meta.Namespace)
	if err != nil {
		return outcome{class: classify(ctx, err), err: err}
	}
	wctx, warnings := cluster.WithWarnings(ctx)
	// Up to three tries: a missing namespace is created and a field the
	// schema lacks pruned, in whichever order the API server reports them.
	var dropped []string
	nsCreated, pruned := false, false
tries:
	for {
		err = pa.e.patch(wctx, cs, ri, obj, pa.mode)
		switch {
		case apierrors.IsNotFound(err) && obj.GetNamespace() != "" && missingNamespace(err, obj.GetNamespace()):
			if nsCreated { // created, but not yet visible to the API server's admission
				err = errNamespaceUnusable{ns: obj.GetNamespace(), cause: err}
				break tries
			}
			// Create the namespace, as helm --create-namespace would, and try again.
			nsCreated = true
			if nerr := pa.e.ensureNamespace(ctx, cs, client, obj.GetNamespace()); nerr != nil {
				c := classify(ctx, nerr)
				if c == permanent {
					nerr, c = errNamespaceUnusable{ns: obj.GetNamespace(), cause: nerr}, waiting
				}
				return outcome{class: c, err: nerr}
			}
			continue
		case !pruned && schemaCheckable(err):
			pruned = true
			var o *outcome
			if dropped, o = pa.checkSchema(ctx, cs, client, r.GVK, obj); o != nil {
				return *o
			}
			if len(dropped) > 0 {
				continue
			}
		}
		break tries
	}
	var ws []string
	if pa.mode == FieldValidationWarn {
		for _, f := range dropped {
			ws = append(ws, fmt.Sprintf("unknown field %q", f))
		}
	}
	ws = append(ws, warnings.List()...)
	return outcome{class: classify(ctx, err), err: err, warnings: ws}
}

// checkSchema prunes the fields the cluster's schema lacks from obj. It
// returns an outcome when that settles the attempt: the object does not
// fit the schema even so, or strict validation refuses unknown fields.
func (pa *placementApply) checkSchema(ctx context.Context, cs *clusterState, client *cluster.Client, gvk schema.GroupVersionKind, obj *unstructured.Unstructured) ([]string, *outcome) {
	if !cs.acquire(ctx) {
		return nil, &outcome{class: transient, err: ctx.Err()}
	}
	g, err := cs.schemas.get(client.Discovery, gvk.GroupVersion())
	cs.release()
	if err != nil {
		pa.log.WithError(err).Debug("cannot read the kind's schema; the apply error stands")
		return nil, nil
	}
	dropped, known, err := g.check(gvk, obj.Object)
	switch {
	case !known:
		return nil, nil
	case err != nil:
		return dropped, &outcome{class: permanent, err: err}
	case len(dropped) > 0 && pa.mode == FieldValidationStrict:
		return dropped, &outcome{class: permanent, err: errUnknownFields{fields: dropped}}
	}
	return dropped, nil
}

// patch server-side applies obj, holding one of the cluster's request slots.
func (e *Engine) patch(ctx context.Context, cs *clusterState, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, mode string) error {
	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	if !cs.acquire(ctx) {
		return ctx.Err()
	}
	defer cs.release()
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	_, err = ri.Patch(rctx, obj.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue(), FieldValidation: mode})
	return err
}

// missingNamespace reports a 404 about the object's namespace, not the object.
func missingNamespace(err error, ns string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || (d.Kind == "namespaces" && d.Name == ns)
}

// resourceFor maps the kind (from the cluster's cached discovery) and
// picks the namespace: a namespaced object without one goes to the
// context's. A kind the cluster does not serve is errNotServed: the
// resource waits for it. Discovery is fetched again for a kind it lacks,
// at most once a second per cluster.
func (e *Engine) resourceFor(cs *clusterState, client *cluster.Client, gvk schema.GroupVersionKind, obj *unstructured.Unstructured, defaultNS string) (dynamic.ResourceInterface, error) {
	mapping, err := client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) && cs.mayRefresh() {
		client.Mapper.Reset()
		mapping, err = client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, errNotServed{kind: gvk.GroupVersion().String() + " " + gvk.Kind}
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gvk.Kind, err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		obj.SetNamespace("")
		return client.Dynamic.Resource(mapping.Resource), nil
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(defaultNS)
	}
	return client.Dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
}

func (e *Engine) ensureNamespace(ctx context.Context, cs *clusterState, client *cluster.Client, ns string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	return e.patch(ctx, cs, client.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}), obj, FieldValidationStrict)
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

// applyBundle applies the app's ResourceBundleState; it reports whether
// that is settled (applied, or impossible). The CRD belongs to the
// monitor's manifests; without it the deployment still succeeds, and the
// status engine reports the monitor NotInstalled.
func (pa *placementApply) applyBundle(ctx context.Context, labels map[string]string) bool {
	c, p := pa.c, pa.p
	client, err := pa.e.opts.Clusters.Client(ctx, p.Cluster)
	if err != nil {
		return false
	}
	var kindList []any
	seen := map[schema.GroupVersionKind]bool{}
	for _, r := range p.Resources {
		if !r.Removed && !seen[r.GVK] {
			seen[r.GVK] = true
			kindList = append(kindList, map[string]any{"group": r.GVK.Group, "version": r.GVK.Version, "kind": r.GVK.Kind})
		}
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
	cs := pa.e.cluster(p.Cluster)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		ri, err := pa.e.resourceFor(cs, client, v1alpha1.GVK(), rbs, c.Meta.Namespace)
		if err == nil {
			err = pa.e.patch(ctx, cs, ri, rbs, FieldValidationStrict)
		}
		switch classify(ctx, err) {
		case done:
			return true
		case waiting:
			pa.log.Warn("the ResourceBundleState CRD is not installed (is the monitor?); the deployment goes on without it")
			return true
		case permanent:
			pa.log.WithError(err).Warn("cannot apply the ResourceBundleState (is the monitor installed?)")
			return true
		}
		if attempt >= 3 {
			return false // tried again with the next pass
		}
		if !backoff.Sleep(ctx, backoffFor(pa.e.opts.BackoffBase, pa.e.opts.BackoffMax, attempt)) {
			return false
		}
	}
	return false
}
