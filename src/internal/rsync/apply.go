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
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// apply applies a context's resources: every placement at once, each
// cluster's requests bounded by ClusterParallelism, each placement's
// resources in waves. It ends when every resource is Applied or Failed;
// Retrying and Waiting resources are tried again until then. firstPass is
// called once every resource was tried.
func (e *Engine) apply(ctx context.Context, id string, update bool, log *logrus.Entry, firstPass func()) error {
	// Manifests are loaded one at a time when applied (or deleted): an
	// action that retries for as long as a cluster is down holds none.
	c, err := e.load(ctx, id)
	if err != nil {
		return err
	}
	names := applyNames
	if update {
		names = updateNames
	}
	if c.Status.Status != names.running {
		if err := e.setStatus(ctx, id, appcontext.Status{Status: names.running}); err != nil {
			return err
		}
	}
	rec := newRecorder(e.ctx, e.store, c, names, log, finalFlushTimeout, guards(ctx))
	mode := c.Meta.FieldValidation
	if mode == "" {
		mode = e.opts.FieldValidation
	}
	// Each cluster's bundles wait for the first pass of all its placements:
	// bookkeeping for the monitor must not slow the apps' own resources.
	perCluster := map[appcontext.ClusterRef]int{}
	for _, p := range c.Placements {
		perCluster[p.Cluster]++
	}
	clusterPass := map[appcontext.ClusterRef]*countdown{}
	for ref, n := range perCluster {
		clusterPass[ref] = newCountdown(n)
	}
	pass := newCountdown(len(c.Placements))
	var all sync.WaitGroup
	for _, p := range c.Placements {
		all.Add(1)
		go func() {
			defer all.Done()
			pa := &placementApply{e: e, c: c, p: p, rec: rec, mode: mode, update: update, clusterPassed: clusterPass[p.Cluster].done,
				firstDone: func() { pass.dec(); clusterPass[p.Cluster].dec() },
				log:       log.WithFields(logrus.Fields{"app": p.App, "cluster": p.Cluster.String()})}
			if e.delegated(p.Cluster) {
				pa.runRemote(ctx)
				return
			}
			pa.run(ctx)
		}()
	}
	select {
	case <-pass.done:
		rec.firstPassDone()
		rec.sync(ctx) // whoever the first pass releases reads its statuses
		firstPass()
	case <-ctx.Done():
	}
	all.Wait()
	rec.finish(ctx.Err() != nil)
	return ctx.Err()
}

// countdown closes done when dec has been called n times.
type countdown struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{n: n, done: make(chan struct{})}
	if n <= 0 {
		close(c.done)
	}
	return c
}

func (c *countdown) dec() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 {
		close(c.done)
	}
}

// placementApply applies one app's resources to one cluster.
type placementApply struct {
	e         *Engine
	c         *appcontext.Context
	p         *appcontext.Placement
	rec       *recorder
	mode      string
	update    bool // an update: hooks are not run
	log       *logrus.Entry
	firstDone func()
	// clusterPassed is closed once every placement on the cluster made its
	// first pass.
	clusterPassed <-chan struct{}
	// heal is the sync request a sync action carries out (nil otherwise).
	heal *appcontext.HealRequest
}

// outcome is one attempt's result for one resource.
type outcome struct {
	class    class
	err      error
	warnings []string
	// fields is the hash of the fields Argus manages on the object the
	// apply returned; adopted names who owned it before, when adopted.
	fields, adopted string
}

func (pa *placementApply) run(ctx context.Context) {
	firstDone := sync.OnceFunc(pa.firstDone)
	defer firstDone()
	p := pa.p
	labels := bundleLabels(pa.c.Meta.StatusID, p.App)
	todo, removed := pa.work()
	// An app that depends on others waits for them before it applies
	// anything; it has made its first pass as far as the rest of the
	// action is concerned (bundles, Idle).
	if deps := pa.c.Meta.Dependencies[p.App]; len(deps) > 0 && len(todo) > 0 {
		if !pa.waitDependencies(ctx, deps, todo, firstDone) {
			return
		}
	}
	var pre, post []appcontext.Resource
	if !pa.update { // updates run no hooks, as EMCO's do not
		pre, post = hooksAt(p, appcontext.HookPreInstall), hooksAt(p, appcontext.HookPostInstall)
	}
	bundleSettled := false
	if len(pre) > 0 {
		// The monitor reports the hooks through the bundle: it goes first.
		bundleSettled = pa.applyBundle(ctx, labels)
		if err := pa.runHooks(ctx, appcontext.HookPreInstall, pre, labels, todo); err != nil {
			if ctx.Err() == nil {
				for _, r := range todo {
					pa.rec.record(p, r.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncFailed, Error: "not applied: " + err.Error()})
				}
			}
			return
		}
	}
	if !pa.applyAll(ctx, todo, removed, labels, firstDone, bundleSettled) || len(post) == 0 {
		return
	}
	if pa.waitReady(ctx, post) {
		_ = pa.runHooks(ctx, appcontext.HookPostInstall, post, labels, nil)
	}
}

// work is what the placement's action has to do: every resource of the
// app not Applied with its current manifest, and the removed ones not
// yet deleted. Hooks are never part of it: they run at their events.
func (pa *placementApply) work() (todo, removed []appcontext.Resource) {
	p := pa.p
	for _, r := range p.Resources {
		st := p.StatusOf(r.Key())
		switch {
		case r.Removed:
			if st.Status != appcontext.RsyncDeleted {
				removed = append(removed, r)
			}
		case r.Hook != nil:
		case st.Status != appcontext.RsyncApplied || st.Manifest == "" || r.ManifestRef == nil || st.Manifest != r.ManifestRef.SHA256:
			todo = append(todo, r)
		}
	}
	return todo, removed
}

// applyAll applies todo and deletes removed, pass after pass, until
// nothing is left to retry; the bundle follows the first pass of every
// placement on the cluster. It reports whether everything was applied
// (nothing Failed, ctx alive).
func (pa *placementApply) applyAll(ctx context.Context, todo, removed []appcontext.Resource, labels map[string]string,
	firstDone func(), bundleSettled bool) bool {
	p := pa.p
	classes := map[string]class{}
	transientAttempt, waitAttempt := 0, 0
	retryFailed := false
	for pass := 1; ; pass++ {
		var changed <-chan struct{}
		release := func() {}
		if pass > 1 && needsChanges(classes) {
			// Subscribed before trying, so a change during the pass is not
			// missed. The cluster's own client watches, whatever credentials
			// the resources are applied with.
			client, _ := pa.e.opts.Clusters.Client(ctx, p.Cluster)
			changed, release = pa.e.subscribe(p.Cluster, client)
		}
		todo = pa.pass(ctx, todo, labels, classes, pass > 1 && !retryFailed, transientAttempt+1)
		if ctx.Err() != nil {
			release()
			return false
		}
		if pass == 1 {
			pa.deleteRemoved(ctx, removed)
			firstDone()
		}
		if !bundleSettled && ctx.Err() == nil {
			bundleSettled = pa.settleBundle(ctx, labels)
		}
		if !needsRetry(classes, todo) {
			release()
			return ctx.Err() == nil && !anyClass(classes, todo, permanent)
		}
		// Wait: transient errors back off; Waiting resources are woken by a
		// change of the cluster's API, or re-checked on a slower timer.
		var timer time.Duration
		hasTransient, hasWaiting := anyClass(classes, todo, transient), anyClass(classes, todo, waiting)
		if hasTransient {
			transientAttempt++
			timer = pa.e.transient.Delay(transientAttempt)
		}
		if hasWaiting {
			waitAttempt++
			if w := pa.e.waiting.Delay(waitAttempt); timer == 0 || w < timer {
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
			return false
		}
	}
}

// deleteRemoved deletes the removed resources, in reverse order.
func (pa *placementApply) deleteRemoved(ctx context.Context, removed []appcontext.Resource) {
	for i := len(removed) - 1; i >= 0; i-- {
		r := removed[i]
		if st, _ := pa.e.deleteWithRetry(ctx, pa.c, pa.p, r); ctx.Err() == nil {
			pa.rec.record(pa.p, r.Key(), st)
		}
	}
}

// settleBundle applies the app's bundle on the cluster, or deletes it when
// the app left the cluster, once every placement on the cluster made its
// first pass (the bundle follows the resources of every app there); it
// reports whether the bundle is settled.
func (pa *placementApply) settleBundle(ctx context.Context, labels map[string]string) bool {
	select {
	case <-pa.clusterPassed:
		if emptied(pa.p) {
			pa.e.deleteBundle(ctx, pa.c, pa.p)
			return true
		}
		return pa.applyBundle(ctx, labels)
	case <-ctx.Done():
		return false
	}
}

// pass tries the resources of todo, wave after wave, those of one wave at
// once; it records each outcome and returns what is left to do. skipFailed
// leaves Failed resources alone. Once the cluster proves unreachable, the
// rest of the pass is not tried: it is Retrying with the same reason.
func (pa *placementApply) pass(ctx context.Context, todo []appcontext.Resource, labels map[string]string, classes map[string]class,
	skipFailed bool, attempt int) []appcontext.Resource {
	p := pa.p
	var next []appcontext.Resource
	var down *appcontext.ResourceStatus
	var blocked *appcontext.ResourceStatus // an Exclusive object of an earlier wave not applied
	var blockedClass class
	for _, wave := range waves(todo) {
		var try []appcontext.Resource
		for _, r := range wave {
			switch {
			case down != nil:
				classes[r.Key()] = transient
				pa.rec.record(p, r.Key(), *down)
				next = append(next, r)
			case blocked != nil:
				classes[r.Key()] = blockedClass
				pa.rec.record(p, r.Key(), *blocked)
				next = append(next, r)
			case skipFailed && classes[r.Key()] == permanent:
				next = append(next, r)
			default:
				try = append(try, r)
			}
		}
		outcomes := make([]outcome, len(try))
		var wg sync.WaitGroup
		for i, r := range try {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outcomes[i] = pa.applyOne(ctx, r, labels)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return next
		}
		for i, r := range try {
			o := outcomes[i]
			classes[r.Key()] = o.class
			st := pa.statusAfter(r, o)
			if o.class == transient {
				st.Attempts = attempt
			}
			pa.rec.record(p, r.Key(), st)
			if o.class == done {
				continue
			}
			if r.Exclusive && blocked == nil {
				blocked = &appcontext.ResourceStatus{Status: st.Status, Attempts: st.Attempts,
					Error: fmt.Sprintf("not applied while %s is not: %s", r.Key(), st.Error)}
				blockedClass = o.class
			}
			next = append(next, r)
			if o.class == transient && unreachable(o.err) && down == nil {
				down = &appcontext.ResourceStatus{Status: appcontext.RsyncRetrying, Error: st.Error, Attempts: attempt}
				pa.log.WithError(o.err).WithField("attempt", attempt).Info("cluster unreachable; retrying")
			} else {
				pa.log.WithError(o.err).WithFields(logrus.Fields{"resource": r.Key(), "status": st.Status}).Info("resource not applied")
			}
		}
	}
	return next
}

// statusAfter is a resource's status after an attempt: what the attempt
// says, with what the resource keeps across applies (its heals, who it was
// adopted from) and, for a heal carried out, one heal more.
func (pa *placementApply) statusAfter(r appcontext.Resource, o outcome) appcontext.ResourceStatus {
	prev := pa.p.StatusOf(r.Key())
	st := appcontext.ResourceStatus{Status: o.class.status(), Error: reason(o.class, o.err), Warnings: o.warnings,
		Heal: prev.Heal, Adopted: prev.Adopted}
	if o.class != done {
		return st
	}
	if r.ManifestRef != nil {
		st.Manifest = r.ManifestRef.SHA256
	}
	st.Fields = o.fields
	if o.adopted != "" {
		st.Adopted = o.adopted
	}
	if pa.heal != nil {
		st.Heal = prev.Heal.Next(pa.heal.By, pa.targetOf(r.Key()).Was, time.Now().UTC())
	}
	return st
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
	client, err := pa.e.clientFor(ctx, pa.c, pa.p.Cluster)
	if err != nil {
		err = fmt.Errorf("cluster %s: %w", pa.p.Cluster, err)
		return outcome{class: classify(ctx, err), err: err}
	}
	manifest, err := pa.e.opts.Manifests.Get(ctx, pa.c.Meta.ID, r)
	if err != nil {
		return outcome{class: transient, err: err}
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(manifest); err != nil {
		return outcome{class: permanent, err: fmt.Errorf("decode manifest: %w", err)}
	}
	decorate(obj, labels)
	setAnnotation(obj, v1alpha1.AnnotationOwner, pa.c.Meta.Group)
	cs := pa.e.cluster(pa.p.Cluster)
	t, err := pa.e.target(cs, client, r.GVK, obj, pa.c.Meta.Namespace)
	if err != nil {
		return outcome{class: classify(ctx, err), err: err}
	}
	if r.Exclusive {
		if err := pa.claim(ctx, cs, t, obj); err != nil {
			return outcome{class: classify(ctx, err), err: err}
		}
	}
	adopted, err := pa.guardWrite(ctx, cs, t, r, obj)
	if err != nil {
		return outcome{class: classify(ctx, err), err: err}
	}
	wctx, warnings := cluster.WithWarnings(ctx)
	// Up to three tries: a missing namespace is created and a field the
	// schema lacks pruned, in whichever order the API server reports them;
	// and a fenced apply that met a change since it read the object reads
	// it again (a few times: a controller may be writing it too).
	var dropped []string
	var applied *unstructured.Unstructured
	nsCreated, pruned, conflicts := false, false, 0
tries:
	for {
		applied, err = pa.e.patch(wctx, cs, t.ri, obj, pa.mode)
		switch {
		case apierrors.IsConflict(err) && obj.GetResourceVersion() != "" && conflicts < 5:
			conflicts++
			if _, ferr := pa.guardWrite(ctx, cs, t, r, obj); ferr != nil {
				return outcome{class: classify(ctx, ferr), err: ferr}
			}
			continue
		case apierrors.IsNotFound(err) && obj.GetNamespace() != "" && missingNamespace(err, obj.GetNamespace()):
			if nsCreated { // created, but not yet visible to the API server's admission
				err = errNamespaceUnusable{ns: obj.GetNamespace(), cause: err}
				break tries
			}
			// Create the namespace, as helm --create-namespace would, and try again.
			nsCreated = true
			if nerr := pa.ensureNamespace(ctx, cs, client, obj.GetNamespace(), labels); nerr != nil {
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
	o := outcome{class: classify(ctx, err), err: err, warnings: ws}
	if o.class != done {
		return o
	}
	o.fields = syncstate.Hash(applied.Object)
	if adopted != "" {
		o.adopted = adopted
		pa.log.WithFields(logrus.Fields{"resource": r.Key(), "from": adopted}).Info("adopted an existing object")
		if aerr := pa.e.consumeAdopt(ctx, cs, t, obj.GetName()); aerr != nil {
			pa.log.WithError(aerr).WithField("resource", r.Key()).Warn("cannot remove the adoption annotation")
		}
	}
	return o
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

// patch server-side applies obj, holding one of the cluster's request
// slots, and returns the object as the API server answered.
func (e *Engine) patch(ctx context.Context, cs *clusterState, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, mode string) (*unstructured.Unstructured, error) {
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	release, ok := cs.acquireKind(ctx, obj.GroupVersionKind().GroupKind())
	if !ok {
		return nil, ctx.Err()
	}
	defer release()
	if err := checkWrite(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	start := time.Now()
	out, err := ri.Patch(rctx, obj.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTrue(), FieldValidation: mode})
	if e.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		e.log.WithFields(logrus.Fields{"kind": obj.GetKind(), "name": obj.GetName(), "namespace": obj.GetNamespace(),
			"ms": time.Since(start).Milliseconds(), "error": err}).Debug("server-side apply")
	}
	return out, err
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

// resourceFor is target's dynamic client for the object.
func (e *Engine) resourceFor(cs *clusterState, client *cluster.Client, gvk schema.GroupVersionKind, obj *unstructured.Unstructured, defaultNS string) (dynamic.ResourceInterface, error) {
	t, err := e.target(cs, client, gvk, obj, defaultNS)
	return t.ri, err
}

// target is where an object goes on a cluster.
type target struct {
	client    *cluster.Client
	ri        dynamic.ResourceInterface
	gvr       schema.GroupVersionResource
	namespace string // "" for a cluster-scoped kind
}

// target maps the kind (from the cluster's cached discovery) and picks the
// namespace: a namespaced object without one goes to the context's. A
// kind the cluster does not serve is errNotServed: the resource waits for
// it. Discovery is fetched again for a kind it lacks, at most once a
// second per cluster.
func (e *Engine) target(cs *clusterState, client *cluster.Client, gvk schema.GroupVersionKind, obj *unstructured.Unstructured, defaultNS string) (target, error) {
	mapping, err := client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) && cs.mayRefresh(client) {
		client.Mapper.Reset()
		mapping, err = client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return target{}, errNotServed{kind: gvk.GroupVersion().String() + " " + gvk.Kind}
	}
	if err != nil {
		return target{}, fmt.Errorf("discover %s: %w", gvk.Kind, err)
	}
	t := target{client: client, gvr: mapping.Resource}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		obj.SetNamespace("")
		t.ri = client.Dynamic.Resource(mapping.Resource)
		return t, nil
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(defaultNS)
	}
	t.namespace = obj.GetNamespace()
	t.ri = client.Dynamic.Resource(mapping.Resource).Namespace(t.namespace)
	return t, nil
}

// ensureNamespace creates a namespace an object of the placement needs:
// the placement's own Exclusive Namespace when it has one (gone since it
// was applied: it comes back as the placement's, claimed), otherwise one
// owned by the group (Engine.ensureNamespace).
func (pa *placementApply) ensureNamespace(ctx context.Context, cs *clusterState, client *cluster.Client, ns string, labels map[string]string) error {
	for _, r := range pa.p.Resources {
		if !r.Exclusive || r.GVK.Kind != "Namespace" || r.GVK.Group != "" || r.Name != ns {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(r.Manifest); err != nil {
			return err
		}
		decorate(obj, labels)
		setAnnotation(obj, v1alpha1.AnnotationOwner, pa.c.Meta.Group)
		nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
		return pa.claim(ctx, cs, target{client: client, ri: client.Dynamic.Resource(nsGVR), gvr: nsGVR}, obj)
	}
	return pa.e.ensureNamespace(ctx, cs, client, ns, pa.c.Meta.Group)
}

// ensureNamespace creates a namespace an object needs, as helm
// --create-namespace does, owned by the group that needed it.
func (e *Engine) ensureNamespace(ctx context.Context, cs *clusterState, client *cluster.Client, ns, owner string) error {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns, "annotations": map[string]any{v1alpha1.AnnotationOwner: owner}}}}
	_, err := e.patch(ctx, cs, client.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}), obj, FieldValidationStrict)
	return err
}

// waves groups resources into what must exist before the next group is
// applied, in Helm's install order: CRDs; Namespaces; what workloads refer
// to (accounts, RBAC, secrets, config, storage, quotas, policies); the
// rest (services, workloads, custom resources); and last what intercepts
// requests (admission webhooks, aggregated APIs). Within a wave resources
// are applied at once, in render order.
func waves(rs []appcontext.Resource) [][]appcontext.Resource {
	var out [5][]appcontext.Resource
	for _, r := range rs {
		w := waveOf(r.GVK)
		out[w] = append(out[w], r)
	}
	var nonEmpty [][]appcontext.Resource
	for _, w := range out {
		if len(w) > 0 {
			nonEmpty = append(nonEmpty, w)
		}
	}
	return nonEmpty
}

func waveOf(gvk schema.GroupVersionKind) int {
	switch gvk.Kind {
	case "CustomResourceDefinition":
		if gvk.Group == "apiextensions.k8s.io" {
			return 0
		}
	case "Namespace":
		if gvk.Group == "" {
			return 1
		}
	case "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount",
		"Secret", "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
		"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		return 2
	case "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		return 4
	}
	return 3
}

// applyBundle applies the app's ResourceBundleState; it reports whether
// that is settled (applied, or impossible). The CRD belongs to the
// monitor's manifests; without it the deployment still succeeds, and the
// status engine reports the monitor NotInstalled. A logical cloud's user
// that may not write it (its permissions leave out k8splugin.io) is
// replaced by the cluster's own credentials; when the bundle cannot be
// applied even so, the reason is recorded as the placement's bundle
// snapshot, so the status says why no bundle reports.
func (pa *placementApply) applyBundle(ctx context.Context, labels map[string]string) bool {
	c, p := pa.c, pa.p
	client, err := pa.e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return false
	}
	rbs := bundleObject(c, p, labels)
	err = pa.putBundle(ctx, client, rbs)
	if apierrors.IsForbidden(err) {
		if admin, aerr := pa.e.bundleClient(ctx, c, p.Cluster); aerr == nil && admin != nil {
			pa.log.WithError(err).Info("the logical cloud's user may not write its ResourceBundleState; writing it with the cluster's credentials")
			err = pa.putBundle(ctx, admin, rbs)
		}
	}
	switch cl := classify(ctx, err); cl {
	case done:
		return true
	case waiting:
		pa.log.Warn("the ResourceBundleState CRD is not installed (is the monitor?); the deployment goes on without it")
		return true
	case permanent:
		pa.log.WithError(err).Warn("cannot apply the ResourceBundleState; the status shows why")
		if p.Bundle == nil && pa.e.opts.Store != nil { // an agent has no store to say it in
			snap := appcontext.BundleSnapshot{Refused: "its ResourceBundleState could not be applied: " + reason(cl, err), Received: time.Now().UTC()}
			if perr := pa.e.opts.Store.PutBundle(ctx, c.Meta.ID, p.App, p.Cluster, snap, guards(ctx)...); perr != nil {
				pa.log.WithError(perr).Warn("cannot record why the ResourceBundleState is missing")
			}
		}
		return true
	}
	return false // tried again with the next pass
}

// bundleObject is the app's ResourceBundleState on its cluster: selecting
// the app's objects, listing the kinds rsync applies for it.
func bundleObject(c *appcontext.Context, p *appcontext.Placement, labels map[string]string) *unstructured.Unstructured {
	var kindList []any
	seen := map[schema.GroupVersionKind]bool{}
	for _, r := range p.Resources {
		if !r.Removed && !seen[r.GVK] {
			seen[r.GVK] = true
			kindList = append(kindList, map[string]any{"group": r.GVK.Group, "version": r.GVK.Version, "kind": r.GVK.Kind})
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
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
}

// putBundle applies the bundle with client, creating its namespace when
// missing and retrying transient errors a few times; the error left is
// the last one (nil once applied).
func (pa *placementApply) putBundle(ctx context.Context, client *cluster.Client, rbs *unstructured.Unstructured) error {
	ns := pa.c.Meta.Namespace
	cs := pa.e.cluster(pa.p.Cluster)
	nsCreated := false
	err := ctx.Err()
	for attempt := 1; ctx.Err() == nil; attempt++ {
		var ri dynamic.ResourceInterface
		ri, err = pa.e.resourceFor(cs, client, v1alpha1.GVK(), rbs, ns)
		if err == nil {
			_, err = pa.e.patch(ctx, cs, ri, rbs, FieldValidationStrict)
		}
		if apierrors.IsNotFound(err) && missingNamespace(err, ns) && !nsCreated {
			// The bundle goes with the app's namespace, which the app's own
			// resources may not have created yet.
			nsCreated = true
			if nerr := pa.e.ensureNamespace(ctx, cs, client, ns, pa.c.Meta.Group); nerr != nil {
				return nerr
			}
			continue
		}
		if classify(ctx, err) != transient || attempt >= 3 {
			return err
		}
		if !pa.e.sleep(ctx, attempt) {
			return ctx.Err()
		}
	}
	return err
}
