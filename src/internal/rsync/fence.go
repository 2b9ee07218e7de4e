package rsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
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

// guardWrite reads the live object's metadata before an apply when the
// apply needs it: to check who owns it (see checkOwner; it returns whom
// the object is adopted from), or to fence the write — the object then
// carries the run's token and, when it exists, its resourceVersion as a
// precondition. An object a newer owner of the deployment wrote is
// refused, and the run stopped.
func (pa *placementApply) guardWrite(ctx context.Context, cs *clusterState, t target, r appcontext.Resource, obj *unstructured.Unstructured) (string, error) {
	// An Exclusive object was claimed just before (never adopted).
	check, tok := !r.Exclusive && pa.needsOwnerCheck(pa.p.StatusOf(r.Key())), token(ctx)
	if !check && tok == 0 {
		return "", nil
	}
	live, err := pa.e.liveMeta(ctx, cs, t, obj.GetName())
	if err != nil {
		return "", err
	}
	var adopted string
	if check {
		if adopted, err = pa.checkOwner(live); err != nil {
			return "", err
		}
	}
	if tok == 0 {
		return adopted, nil
	}
	setAnnotation(obj, v1alpha1.AnnotationFence, strconv.FormatInt(tok, 10))
	obj.SetResourceVersion("")
	if live == nil {
		return adopted, nil
	}
	if newerToken(live, pa.c.Meta.StatusID, tok) {
		err := errStale(obj.GetKind()+" "+obj.GetName(), live)
		fencingOf(ctx).stop(err)
		return "", err
	}
	obj.SetResourceVersion(live.GetResourceVersion())
	return adopted, nil
}

// guardDelete reads the live object's metadata before a delete that needs
// it: of a group that owns its objects or of an Exclusive object (one
// another deployment holds is left alone: owner names it), or fenced. The options make the delete
// conditional on what was read (uid, and resourceVersion when fenced);
// gone reports an object already gone. One a newer owner of the
// deployment wrote is refused, and the run stopped.
func (e *Engine) guardDelete(ctx context.Context, cs *clusterState, t target, c *appcontext.Context, r appcontext.Resource,
	obj *unstructured.Unstructured) (opts metav1.DeleteOptions, owner string, gone bool, err error) {
	opts = metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}
	tok, own := token(ctx), guarded(c.Meta) || r.Exclusive
	if !own && tok == 0 {
		return opts, "", false, nil
	}
	name := obj.GetName()
	live, err := e.liveMeta(ctx, cs, t, name)
	if err != nil || live == nil {
		return opts, "", live == nil && err == nil, err
	}
	if own {
		if v := judge(live, c.Meta); !v.ours {
			return opts, v.owner, false, nil
		}
	}
	uid := live.GetUID()
	opts.Preconditions = &metav1.Preconditions{UID: &uid}
	if tok == 0 {
		return opts, "", false, nil
	}
	if newerToken(live, c.Meta.StatusID, tok) {
		err := errStale(obj.GetKind()+" "+name, live)
		fencingOf(ctx).stop(err)
		return opts, "", false, err
	}
	rv := live.GetResourceVersion()
	opts.Preconditions.ResourceVersion = &rv
	return opts, "", false, nil
}

// setStatus records a context's status under the run's fence.
func (e *Engine) setStatus(ctx context.Context, id string, st appcontext.Status) error {
	err := e.store.SetStatus(ctx, id, st, guards(ctx)...)
	if errors.Is(err, appcontext.ErrGuard) {
		err = fmt.Errorf("%w: the group's claim is no longer this replica's", ownership.ErrFenced)
		if stop := fencingOf(ctx).stop; stop != nil {
			stop(err)
		}
	}
	return err
}
