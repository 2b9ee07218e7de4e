package rsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
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
	"github.com/argus-mc/argus/src/internal/ownership"
)

// Fenced writes. A group's actions run on its owner (Dispatcher), which
// may lose the group without noticing yet: paused longer than its lease,
// or cut off from etcd while its requests to clusters still go out. Its
// writes must then change nothing, or a newer revision applied by the
// group's next owner would be overwritten with an older one. So every
// write of a run is fenced by the owner's ownership.Fence:
//
//   - Before each request to a cluster the fence is checked (Wait): past
//     the renew deadline of its lease a replica stops writing, before
//     the lease can expire and another replica take the group over.
//   - Each applied object carries the fence's token (its claim revision,
//     v1alpha1.AnnotationFence), and each write is conditional on the
//     object as read just before: applied with its resourceVersion as a
//     precondition, deleted with its uid and resourceVersion. A replica
//     paused between the check and its request (the check cannot cover
//     that) meets a Conflict if another owner wrote the object meanwhile,
//     reads it again and finds a newer token: it refuses (ErrFenced).
//   - Its statuses go to etcd in transactions guarded by its claim.
//
// A fenced run stops at once (its context is cancelled with the fence's
// error) and leaves its action record to the group's next owner.

// fencing is a run's fence and how to stop the run when it fails.
type fencing struct {
	fence ownership.Fence
	stop  context.CancelCauseFunc
}

type fencingKey struct{}

// withFencing makes ctx carry the run's fencing.
func withFencing(ctx context.Context, f fencing) context.Context {
	return context.WithValue(ctx, fencingKey{}, f)
}

// fencingOf is the fencing ctx carries; the zero one fences nothing.
func fencingOf(ctx context.Context) fencing {
	f, _ := ctx.Value(fencingKey{}).(fencing)
	return f
}

// fenced reports whether err is a fence's refusal.
func fenced(err error) bool { return errors.Is(err, ownership.ErrFenced) }

// checkWrite is called right before each request that writes to a
// cluster: it returns nil while the run may write, and otherwise stops
// the run and returns why.
func checkWrite(ctx context.Context) error {
	f := fencingOf(ctx)
	err := f.fence.Wait(ctx)
	if err != nil && fenced(err) && f.stop != nil {
		f.stop(err)
	}
	return err
}

// guards are the etcd conditions of the run's status writes.
func guards(ctx context.Context) []clientv3.Cmp { return fencingOf(ctx).fence.Guards() }

// token is the run's fencing token; 0 when unfenced.
func token(ctx context.Context) int64 { return fencingOf(ctx).fence.Token() }

// newerToken reports whether live was written for the same deployment
// (its status context) under a newer claim than token.
func newerToken(live metav1.Object, statusID string, token int64) bool {
	if live.GetLabels()[v1alpha1.LabelContextID] != statusID {
		return false // another deployment's tokens say nothing of ours
	}
	theirs, err := strconv.ParseInt(live.GetAnnotations()[v1alpha1.AnnotationFence], 10, 64)
	return err == nil && theirs > token
}

// errStale is an object a newer owner of the deployment wrote.
func errStale(obj string, theirs metav1.Object) error {
	return fmt.Errorf("%w: %s was written by a newer owner of the deployment (fence %s)", ownership.ErrFenced, obj,
		theirs.GetAnnotations()[v1alpha1.AnnotationFence])
}

// liveObject reads an object's metadata as the cluster has it (through
// the metadata client when there is one: nothing else crosses the wire);
// nil when it does not exist.
func (e *Engine) liveObject(ctx context.Context, cs *clusterState, client *cluster.Client, ri dynamic.ResourceInterface,
	gvk schema.GroupVersionKind, namespace, name string) (metav1.Object, error) {
	if !cs.acquire(ctx) {
		return nil, ctx.Err()
	}
	defer cs.release()
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	var live metav1.Object
	var err error
	if m, merr := client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); client.Metadata != nil && merr == nil {
		var pm *metav1.PartialObjectMetadata
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			pm, err = client.Metadata.Resource(m.Resource).Namespace(namespace).Get(rctx, name, metav1.GetOptions{})
		} else {
			pm, err = client.Metadata.Resource(m.Resource).Get(rctx, name, metav1.GetOptions{})
		}
		live = pm
	} else {
		var u *unstructured.Unstructured
		u, err = ri.Get(rctx, name, metav1.GetOptions{})
		live = u
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return live, nil
}

// fenceApply makes obj's apply conditional (see above): it carries the
// run's token and, when the object exists, its resourceVersion. An object
// a newer owner wrote is refused, and the run stopped.
func (pa *placementApply) fenceApply(ctx context.Context, cs *clusterState, client *cluster.Client, ri dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	tok := token(ctx)
	if tok == 0 {
		return nil
	}
	live, err := pa.e.liveObject(ctx, cs, client, ri, obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())
	if err != nil {
		return err
	}
	setAnnotation(obj, v1alpha1.AnnotationFence, strconv.FormatInt(tok, 10))
	obj.SetResourceVersion("")
	if live == nil {
		return nil
	}
	if newerToken(live, pa.c.Meta.StatusID, tok) {
		err := errStale(obj.GetKind()+" "+obj.GetName(), live)
		fencingOf(ctx).stop(err)
		return err
	}
	obj.SetResourceVersion(live.GetResourceVersion())
	return nil
}

// fenceDelete reads the object before a fenced delete: the options make
// the delete conditional on what was read; gone reports an object already
// gone. One a newer owner wrote is refused, and the run stopped.
func (e *Engine) fenceDelete(ctx context.Context, cs *clusterState, client *cluster.Client, ri dynamic.ResourceInterface, c *appcontext.Context,
	obj *unstructured.Unstructured) (opts metav1.DeleteOptions, gone bool, err error) {
	policy := metav1.DeletePropagationBackground
	opts.PropagationPolicy = &policy
	tok := token(ctx)
	if tok == 0 {
		return opts, false, nil
	}
	name := obj.GetName()
	live, err := e.liveObject(ctx, cs, client, ri, obj.GroupVersionKind(), obj.GetNamespace(), name)
	if err != nil || live == nil {
		return opts, live == nil && err == nil, err
	}
	if newerToken(live, c.Meta.StatusID, tok) {
		err := errStale(obj.GetKind()+" "+name, live)
		fencingOf(ctx).stop(err)
		return opts, false, err
	}
	uid, rv := types.UID(live.GetUID()), live.GetResourceVersion()
	opts.Preconditions = &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
	return opts, false, nil
}

// setAnnotation sets one annotation of obj.
func setAnnotation(obj *unstructured.Unstructured, key, value string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
}

// setStatus records a context's status under the run's fence.
func (e *Engine) setStatus(ctx context.Context, id string, st appcontext.Status) error {
	err := e.opts.Store.SetStatus(ctx, id, st, guards(ctx)...)
	if errors.Is(err, appcontext.ErrGuard) {
		err = fmt.Errorf("%w: the group's claim is no longer this replica's", ownership.ErrFenced)
		if stop := fencingOf(ctx).stop; stop != nil {
			stop(err)
		}
	}
	return err
}
