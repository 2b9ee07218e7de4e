package rsync

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// delete deletes a context's resources from every cluster at once, each
// placement's in reverse apply order, after its ResourceBundleState. An app
// others depend on goes once they are gone (dependencies in reverse).
// Helm's delete hooks run around the deletion (hooks.go).
func (e *Engine) delete(ctx context.Context, id string, log *logrus.Entry) error {
	// Manifests are loaded one at a time when applied (or deleted): an
	// action that retries for as long as a cluster is down holds none.
	c, err := e.load(ctx, id)
	if err != nil {
		return err
	}
	if c.Status.Status != appcontext.Terminating {
		if err := e.setStatus(ctx, id, appcontext.Status{Status: appcontext.Terminating}); err != nil {
			return err
		}
	}
	rec := newRecorder(e.ctx, e.store, c, deleteNames, log, finalFlushTimeout, guards(ctx))
	gone := make(map[*appcontext.Placement]chan struct{}, len(c.Placements))
	for _, p := range c.Placements {
		gone[p] = make(chan struct{})
	}
	mode := c.Meta.FieldValidation
	if mode == "" {
		mode = e.opts.FieldValidation
	}
	var wg sync.WaitGroup
	for _, p := range c.Placements {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(gone[p])
			for _, d := range dependents(c, p) {
				select {
				case <-gone[d]:
				case <-ctx.Done():
					return
				}
			}
			if e.delegated(p.Cluster) {
				e.deleteRemote(ctx, c, p, rec, log)
				return
			}
			pa := &placementApply{e: e, c: c, p: p, rec: rec, mode: mode, firstDone: func() {},
				log: log.WithFields(logrus.Fields{"app": p.App, "cluster": p.Cluster.String()})}
			pa.deleteAll(ctx)
		}()
	}
	wg.Wait()
	rec.finish(ctx.Err() != nil)
	return ctx.Err()
}

// deleteAll deletes one placement: its pre-delete hooks run first (its
// bundle kept for them), then its resources go in reverse waves, then its
// post-delete hooks run, and then every hook object left and the bundle
// go. A delete hook that fails is logged; the deletion goes on.
func (pa *placementApply) deleteAll(ctx context.Context) {
	e, c, p := pa.e, pa.c, pa.p
	labels := bundleLabels(c.Meta.StatusID, p.App)
	pre, post := hooksAt(p, appcontext.HookPreDelete), hooksAt(p, appcontext.HookPostDelete)
	if len(pre)+len(post) == 0 {
		e.deleteBundle(ctx, c, p)
	}
	if err := pa.runHooks(ctx, appcontext.HookPreDelete, pre, labels, nil); err != nil && ctx.Err() == nil {
		pa.log.WithError(err).Warn("a pre-delete hook failed; deleting the app all the same")
	}
	var left, hooks []appcontext.Resource
	for _, r := range p.Resources {
		switch {
		case r.Hook != nil: // whatever install left of it, and what the delete hooks made
			hooks = append(hooks, r)
		case p.StatusOf(r.Key()).Status != appcontext.RsyncDeleted:
			left = append(left, r)
		}
	}
	pa.deleteWaves(ctx, left)
	if ctx.Err() != nil {
		return
	}
	if err := pa.runHooks(ctx, appcontext.HookPostDelete, post, labels, nil); err != nil && ctx.Err() == nil {
		pa.log.WithError(err).Warn("a post-delete hook failed")
	}
	// Every hook goes with the app, as EMCO's rsync deletes them all.
	pa.deleteWaves(ctx, hooks)
	if len(pre)+len(post) > 0 && ctx.Err() == nil {
		e.deleteBundle(ctx, c, p)
	}
}

// deleteWaves deletes resources in reverse apply order, a wave at once.
func (pa *placementApply) deleteWaves(ctx context.Context, rs []appcontext.Resource) {
	ws := waves(rs)
	for i := len(ws) - 1; i >= 0 && ctx.Err() == nil; i-- {
		var wg sync.WaitGroup
		for _, r := range ws[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := pa.e.deleteWithRetry(ctx, pa.c, pa.p, r)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					pa.log.WithError(err).WithField("resource", r.Key()).Warn("cannot delete")
				}
				pa.rec.record(pa.p, r.Key(), st)
			}()
		}
		wg.Wait()
	}
}

// deleteWithRetry deletes one resource, retrying transient errors with
// backoff, and returns its status: Deleted (with a warning when the object
// was another's and stayed) or Failed; or ctx ended.
func (e *Engine) deleteWithRetry(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) (appcontext.ResourceStatus, error) {
	for attempt := 1; ; attempt++ {
		cl, owner, err := e.deleteOne(ctx, c, p, r)
		if cl != transient || ctx.Err() != nil {
			switch {
			case cl == done && owner != "":
				return appcontext.ResourceStatus{Status: appcontext.RsyncDeleted, Warnings: []string{"left in place: owned by " + owner}}, nil
			case cl == done:
				return appcontext.ResourceStatus{Status: appcontext.RsyncDeleted}, nil
			}
			return appcontext.ResourceStatus{Status: appcontext.RsyncFailed, Error: reason(classify(ctx, err), err)}, err
		}
		if !e.sleep(ctx, attempt) {
			return appcontext.ResourceStatus{Status: appcontext.RsyncFailed, Error: reason(transient, ctx.Err())}, ctx.Err()
		}
	}
}

// deleteOne deletes one resource. Of a deployment intent group or an
// instance, and an Exclusive object of any group, only an object the
// group owns is deleted (and only that object: the delete is conditional
// on its uid); another's is left in place and its owner returned.
func (e *Engine) deleteOne(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) (class, string, error) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		err = fmt.Errorf("cluster %s: %w", p.Cluster, err)
		return classify(ctx, err), "", err
	}
	manifest, err := e.opts.Manifests.Get(ctx, c.Meta.ID, r)
	if err != nil {
		return transient, "", err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(manifest); err != nil {
		return permanent, "", fmt.Errorf("decode manifest: %w", err)
	}
	cs := e.cluster(p.Cluster)
	t, err := e.target(cs, client, r.GVK, obj, c.Meta.Namespace)
	var notServed errNotServed
	if errors.As(err, &notServed) {
		return done, "", nil // the kind is gone, and so is the object
	}
	if err != nil {
		return classify(ctx, err), "", err
	}
	opts, owner, gone, err := e.guardDelete(ctx, cs, t, c, r, obj)
	switch {
	case err != nil:
		return classify(ctx, err), "", err
	case owner != "":
		return done, owner, nil
	case gone:
		return done, "", nil
	}
	if !cs.acquire(ctx) {
		return transient, "", ctx.Err()
	}
	defer cs.release()
	if err := checkWrite(ctx); err != nil {
		return classify(ctx, err), "", err
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	// A Conflict (the object changed since it was read) is transient: the
	// next attempt reads it again.
	err = t.ri.Delete(rctx, obj.GetName(), opts)
	if err == nil || apierrors.IsNotFound(err) {
		return done, "", nil
	}
	return classify(ctx, err), "", err
}

// deleteBundle deletes the app's ResourceBundleState, retrying while the
// cluster cannot be reached; with the cluster's credentials when a
// logical cloud's user may not (applyBundle wrote it so).
func (e *Engine) deleteBundle(ctx context.Context, c *appcontext.Context, p *appcontext.Placement) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		return
	}
	cs := e.cluster(p.Cluster)
	for attempt := 1; ctx.Err() == nil; attempt++ {
		if !cs.acquire(ctx) {
			return
		}
		if checkWrite(ctx) != nil {
			cs.release()
			return
		}
		err := client.Dynamic.Resource(v1alpha1.GVR()).Namespace(c.Meta.Namespace).Delete(ctx, BundleName(p.App, c.Meta.StatusID), metav1.DeleteOptions{})
		cs.release()
		if apierrors.IsForbidden(err) {
			if admin, aerr := e.bundleClient(ctx, c, p.Cluster); aerr == nil && admin != nil && admin != client {
				client = admin
				continue
			}
		}
		if err == nil || apierrors.IsNotFound(err) || classify(ctx, err) != transient {
			return
		}
		if !e.sleep(ctx, attempt) {
			return
		}
	}
}
