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
func (e *Engine) delete(ctx context.Context, id string, log *logrus.Entry) error {
	// Manifests are loaded one at a time when applied (or deleted): an
	// action that retries for as long as a cluster is down holds none.
	c, err := e.opts.Store.GetWithoutManifests(ctx, id)
	if err != nil {
		return err
	}
	if c.Status.Status != appcontext.Terminating {
		if err := e.opts.Store.SetStatus(ctx, id, appcontext.Status{Status: appcontext.Terminating}); err != nil {
			return err
		}
	}
	rec := newRecorder(e.opts.Store, c, deleteNames, log)
	gone := make(map[*appcontext.Placement]chan struct{}, len(c.Placements))
	for _, p := range c.Placements {
		gone[p] = make(chan struct{})
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
			e.deleteBundle(ctx, c, p)
			var left []appcontext.Resource
			for _, r := range p.Resources {
				if p.StatusOf(r.Key()).Status != appcontext.RsyncDeleted {
					left = append(left, r)
				}
			}
			ws := waves(left)
			for i := len(ws) - 1; i >= 0 && ctx.Err() == nil; i-- { // in reverse, a wave at once
				var wwg sync.WaitGroup
				for _, r := range ws[i] {
					wwg.Add(1)
					go func() {
						defer wwg.Done()
						st, err := e.deleteWithRetry(ctx, c, p, r)
						if ctx.Err() != nil {
							return
						}
						if err != nil {
							log.WithError(err).WithField("resource", r.Key()).Warn("cannot delete")
						}
						rec.record(p, r.Key(), appcontext.ResourceStatus{Status: st, Error: reason(classify(ctx, err), err)})
					}()
				}
				wwg.Wait()
			}
		}()
	}
	wg.Wait()
	rec.finish(ctx.Err() != nil)
	return ctx.Err()
}

// deleteWithRetry deletes one resource, retrying transient errors with
// backoff until it is Deleted or Failed, or ctx ends.
func (e *Engine) deleteWithRetry(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) (string, error) {
	for attempt := 1; ; attempt++ {
		cl, err := e.deleteOne(ctx, c, p, r)
		if cl != transient || ctx.Err() != nil {
			if cl == done {
				return appcontext.RsyncDeleted, nil
			}
			return appcontext.RsyncFailed, err
		}
		if !e.sleep(ctx, attempt) {
			return appcontext.RsyncFailed, ctx.Err()
		}
	}
}

func (e *Engine) deleteOne(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, r appcontext.Resource) (class, error) {
	client, err := e.clientFor(ctx, c, p.Cluster)
	if err != nil {
		err = fmt.Errorf("cluster %s: %w", p.Cluster, err)
		return classify(ctx, err), err
	}
	manifest, err := e.opts.Manifests.Get(ctx, c.Meta.ID, r)
	if err != nil {
		return transient, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(manifest); err != nil {
		return permanent, fmt.Errorf("decode manifest: %w", err)
	}
	cs := e.cluster(p.Cluster)
	ri, err := e.resourceFor(cs, client, r.GVK, obj, c.Meta.Namespace)
	var notServed errNotServed
	if errors.As(err, &notServed) {
		return done, nil // the kind is gone, and so is the object
	}
	if err != nil {
		return classify(ctx, err), err
	}
	if !cs.acquire(ctx) {
		return transient, ctx.Err()
	}
	defer cs.release()
	policy := metav1.DeletePropagationBackground
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	err = ri.Delete(rctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy})
	if err == nil || apierrors.IsNotFound(err) {
		return done, nil
	}
	return classify(ctx, err), err
}

// deleteBundle deletes the app's ResourceBundleState, retrying while the
// cluster cannot be reached.
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
		err := client.Dynamic.Resource(v1alpha1.GVR()).Namespace(c.Meta.Namespace).Delete(ctx, BundleName(p.App, c.Meta.StatusID), metav1.DeleteOptions{})
		cs.release()
		if err == nil || apierrors.IsNotFound(err) || classify(ctx, err) != transient {
			return
		}
		if !e.sleep(ctx, attempt) {
			return
		}
	}
}
