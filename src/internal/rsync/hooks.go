package rsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Helm hooks run as EMCO's rsync runs them (emco-base
// src/rsync/pkg/context/routines.go): on instantiate, the pre-install
// hooks one after another, each waited for, before the app's resources;
// the post-install hooks once the app is Ready on the cluster; on
// terminate, the pre-delete hooks before the app's resources are deleted
// and the post-delete hooks after, then every hook object left. Hooks of
// one event go by weight, then kind and name (render order). Delete
// policies as Helm's: before-hook-creation (the default) deletes an
// object of the hook's name before the hook is applied, hook-succeeded and
// hook-failed delete it once it succeeded or failed. Updates run no hooks,
// as EMCO's do not. A hook's outcome is what the cluster's monitor reports
// (the context cache, as for dependencies): a Pod Succeeded, a Job
// complete, a Deployment, DaemonSet, StatefulSet or ReplicaSet Ready;
// other kinds are done once applied.

// hooksAt lists the placement's hooks that run at event, in order.
func hooksAt(p *appcontext.Placement, event string) []appcontext.Resource {
	var out []appcontext.Resource
	for _, r := range p.Resources {
		if !r.Removed && r.Hook.At(event) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Hook.Weight < out[j].Hook.Weight })
	return out
}

// withoutHooks is the placement with only its app's own resources.
func withoutHooks(p *appcontext.Placement) *appcontext.Placement {
	out := *p
	out.Resources = nil
	for _, r := range p.Resources {
		if r.Hook == nil {
			out.Resources = append(out.Resources, r)
		}
	}
	return &out
}

// waitedKinds are the kinds whose hooks are waited for (as EMCO's
// HelmHookRelevantKindSet); others are done once applied.
var waitedKinds = map[string]bool{"Pod": true, "Job": true, "Deployment": true, "DaemonSet": true, "StatefulSet": true, "ReplicaSet": true}

// hookOutcome says how a hook the cluster reports is doing: done, failed
// (with the reason), or neither yet (with what it is). Pure.
func hookOutcome(obs *appcontext.Placement, r appcontext.Resource, namespace string) (done bool, failed, why string) {
	if !waitedKinds[r.GVK.Kind] {
		return true, "", ""
	}
	if obs == nil || obs.Bundle == nil || obs.Bundle.Index == nil {
		return false, "", "its ResourceBundleState has not reported yet"
	}
	ns := r.Namespace
	if ns == "" {
		ns = namespace
	}
	e := obs.Bundle.Index.Get(appcontext.EntryRef{Group: r.GVK.Group, Kind: r.GVK.Kind, Namespace: ns, Name: r.Name})
	if e == nil {
		return false, "", "not reported by the cluster yet"
	}
	if r.GVK.Kind == "Pod" && r.GVK.Group == "" {
		var st struct {
			Phase string `json:"phase"`
		}
		if e.Typed != nil && e.Typed.Status != nil {
			_ = json.Unmarshal(e.Typed.Status.Raw, &st)
		}
		switch st.Phase {
		case "Succeeded":
			return true, "", ""
		case "Failed":
			return false, "the Pod failed" + paren(e.Reason), ""
		}
		return false, "", "Pod phase " + or(st.Phase, "unknown") + paren(e.Reason)
	}
	switch e.ReadyStatus {
	case "Ready":
		return true, "", ""
	case "Failed":
		return false, or(e.Reason, "Failed"), ""
	}
	return false, "", e.ReadyStatus + paren(e.Reason)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// errHook is a hook that failed; what waits for it is not done.
type errHook struct {
	event, what, reason string
}

func (e errHook) Error() string { return e.event + " hook " + e.what + " failed: " + e.reason }

// runHooks runs hooks (of event, in order) one after another: each is
// applied (after its before-hook-creation deletion) and waited for until
// it succeeded, then deleted if its policy says so. Meanwhile the
// resources of waiting show Waiting with the reason. It returns the first
// failure (an errHook), or ctx's error. An install's hooks that an
// earlier process already ran (Deleted by their policy, or Applied) are
// not applied again; delete hooks always run (install left their status).
func (pa *placementApply) runHooks(ctx context.Context, event string, hooks []appcontext.Resource, labels map[string]string,
	waiting []appcontext.Resource) error {
	install := event == appcontext.HookPreInstall || event == appcontext.HookPostInstall
	for _, r := range hooks {
		st := pa.p.StatusOf(r.Key()).Status
		if install && st == appcontext.RsyncDeleted {
			continue // it ran before this process took over, and went as its policy says
		}
		err := pa.runHook(ctx, event, r, labels, waiting, !install || st != appcontext.RsyncApplied)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runHook runs one hook, bounded by HookTimeout; apply is false for one
// already applied, which is only waited for.
func (pa *placementApply) runHook(ctx context.Context, event string, r appcontext.Resource, labels map[string]string,
	waiting []appcontext.Resource, apply bool) error {
	what := r.GVK.Kind + "/" + r.Name
	log := pa.log.WithFields(map[string]any{"hook": what, "event": event})
	hctx, cancel := context.WithTimeout(ctx, pa.e.opts.HookTimeout)
	defer cancel()
	fail := func(reason string) error {
		if r.Hook.Deletes(appcontext.HookFailed) {
			_, _ = pa.e.deleteWithRetry(context.WithoutCancel(hctx), pa.c, pa.p, r)
		}
		pa.rec.record(pa.p, r.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncFailed, Error: event + " hook failed: " + reason})
		log.WithField("reason", reason).Warn("hook failed")
		return errHook{event: event, what: what, reason: reason}
	}
	if apply {
		if r.Hook.Deletes(appcontext.HookBeforeCreation) {
			if err := pa.e.deleteAndWait(hctx, pa.c, pa.p, r); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fail("cannot delete the previous " + what + ": " + err.Error())
			}
		}
		if err := pa.applyHook(hctx, r, labels); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fail(err.Error())
		}
	}
	ok, why := pa.waitHook(hctx, event, r, waiting)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !ok {
		if hctx.Err() != nil {
			why = fmt.Sprintf("it did not succeed within %s (%s)", pa.e.opts.HookTimeout, why)
		}
		return fail(why)
	}
	log.Info("hook succeeded")
	if r.Hook.Deletes(appcontext.HookSucceeded) {
		st, _ := pa.e.deleteWithRetry(ctx, pa.c, pa.p, r)
		pa.rec.record(pa.p, r.Key(), st)
	}
	return nil
}

// applyHook applies a hook, trying again while the cluster cannot take
// it yet (unreachable, its kind or namespace missing); what the API
// server refuses is final.
func (pa *placementApply) applyHook(ctx context.Context, r appcontext.Resource, labels map[string]string) error {
	for attempt := 1; ; attempt++ {
		o := pa.applyOne(ctx, r, labels)
		st := appcontext.ResourceStatus{Status: o.class.status(), Error: reason(o.class, o.err), Warnings: o.warnings}
		if o.class == done && r.ManifestRef != nil {
			st.Manifest = r.ManifestRef.SHA256
		}
		if o.class != permanent { // a Failed hook is recorded with its event by the caller
			pa.rec.record(pa.p, r.Key(), st)
		}
		switch o.class {
		case done:
			return nil
		case permanent:
			return o.err
		}
		if !pa.e.sleep(ctx, attempt) {
			return ctx.Err()
		}
	}
}

// waitHook waits until the cluster reports the hook succeeded (true) or
// failed (false, with the reason), or ctx ends (false, what it was).
// Woken by the context cache's changes of the group; the resources of
// waiting show Waiting with the reason meanwhile.
func (pa *placementApply) waitHook(ctx context.Context, event string, r appcontext.Resource, waiting []appcontext.Resource) (bool, string) {
	if pa.e.opts.Observed == nil || !waitedKinds[r.GVK.Kind] {
		return true, ""
	}
	changed, release := pa.e.listen(pa.c.Meta.Group)
	defer release()
	shown, last := "", "not checked yet"
	for {
		var ok bool
		var failed, why string
		err := pa.e.opts.Observed.View(ctx, pa.c.Meta.ID, func(obs *appcontext.Context, _ map[appcontext.ClusterRef]appcontext.ClusterState) {
			var op *appcontext.Placement
			if obs != nil {
				op = obs.Placement(pa.p.App, pa.p.Cluster)
			}
			ok, failed, why = hookOutcome(op, r, pa.c.Meta.Namespace)
		})
		switch {
		case err != nil || ctx.Err() != nil:
			return false, last
		case ok:
			return true, ""
		case failed != "":
			return false, failed
		}
		last = why
		if msg := fmt.Sprintf("waiting for %s hook %s/%s: %s", event, r.GVK.Kind, r.Name, why); msg != shown && len(waiting) > 0 {
			shown = msg
			for _, w := range waiting {
				pa.rec.record(pa.p, w.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncWaiting, Error: msg})
			}
		}
		select {
		case <-ctx.Done():
			return false, last
		case <-changed:
		}
	}
}

// waitReady waits until the app (its own resources) is Ready on the
// cluster, as the monitor reports it, before its post-install hooks; the
// hooks show Waiting with the reason meanwhile. false when ctx ended.
func (pa *placementApply) waitReady(ctx context.Context, hooks []appcontext.Resource) bool {
	if pa.e.opts.Observed == nil {
		return true
	}
	want := withoutHooks(pa.p)
	changed, release := pa.e.listen(pa.c.Meta.Group)
	defer release()
	shown := ""
	for {
		met, why := false, ""
		err := pa.e.opts.Observed.View(ctx, pa.c.Meta.ID, func(obs *appcontext.Context, _ map[appcontext.ClusterRef]appcontext.ClusterState) {
			var op *appcontext.Placement
			if obs != nil {
				op = obs.Placement(pa.p.App, pa.p.Cluster)
			}
			met, why = reached(want, op, appcontext.OpStatusReady, pa.c.Meta.Namespace)
		})
		if err != nil || ctx.Err() != nil {
			return false
		}
		if met {
			return true
		}
		if msg := "waiting for the app to be Ready before its post-install hooks: " + why; msg != shown {
			shown = msg
			for _, h := range hooks {
				pa.rec.record(pa.p, h.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncWaiting, Error: msg})
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// deleteAndWait deletes an object of the hook's kind and name, if there
// is one, and waits (with a watch) until it is gone: Helm's
// before-hook-creation.
func (e *Engine) deleteAndWait(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) error {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return err
	}
	manifest, err := e.opts.Manifests.Get(ctx, c.Meta.ID, r)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(manifest); err != nil {
		return fmt.Errorf("decode manifest: %w", err)
	}
	ri, err := e.resourceFor(e.cluster(p.Cluster), client, r.GVK, obj, c.Meta.Namespace)
	var notServed errNotServed
	if errors.As(err, &notServed) {
		return nil // no such kind yet: no such object either
	}
	if err != nil {
		return err
	}
	cur, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if tok := token(ctx); tok != 0 && newerToken(cur, c.Meta.StatusID, tok) {
		err := errStale(cur.GetKind()+" "+cur.GetName(), cur)
		fencingOf(ctx).stop(err)
		return err
	}
	if err := checkWrite(ctx); err != nil {
		return err
	}
	policy := metav1.DeletePropagationBackground
	if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy,
		Preconditions: &metav1.Preconditions{UID: ptr(cur.GetUID())}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", obj.GetName()).String(),
		ResourceVersion: cur.GetResourceVersion()})
	if err != nil {
		return err
	}
	defer w.Stop()
	if _, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil // gone before the watch began
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch ended before the object was gone")
			}
			if ev.Type == watch.Deleted {
				return nil
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// hookTimeoutDefault bounds each hook's run, as Helm's --timeout does.
const hookTimeoutDefault = 5 * time.Minute
