package rsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// errOwned is an object rsync may not apply over: it belongs to another
// deployment, or to nothing Argus knows. Permanent: tried again by the
// next update (or sync), when the owner may have let go of it. exclusive
// names an Exclusive object ("Namespace \"x\""), which is never adopted:
// only its owner annotation hands it over.
type errOwned struct{ owner, group, exclusive string }

func (e errOwned) Error() string {
	if e.exclusive != "" {
		return fmt.Sprintf("%s exists on the cluster and was not created by this deployment: it is owned by %s and never taken over "+
			"(annotating it %s=%s hands it over, to be deleted with it)", e.exclusive, e.owner, v1alpha1.AnnotationOwner, e.group)
	}
	policy := "spec.syncPolicy.adopt"
	if strings.HasPrefix(e.group, "instance:") {
		policy = "sync-policy.adopt"
	}
	return "owned by " + e.owner + "; Argus does not apply over it (to take it over, set the deployment's " +
		policy + " and annotate the object " + v1alpha1.AnnotationAdopt + `: "true")`
}

// verdict is what rsync may do with an object that exists already.
type verdict struct {
	ours  bool   // the group's own object
	adopt bool   // another's, which the group may adopt
	owner string // who holds it, for a refusal or an adoption record
}

// judge decides whether the group may apply over live. Its own objects
// carry its owner annotation, or its status context label (objects a
// migrate hands over keep the source's status context; an Argus that did
// not write owners yet wrote only the label); any other object is
// refused, unless the group adopts and the object allows it.
func judge(live metav1.Object, meta appcontext.Meta) verdict {
	ann, labels := live.GetAnnotations(), live.GetLabels()
	if ann[v1alpha1.AnnotationOwner] == meta.Group || meta.StatusID != "" && labels[v1alpha1.LabelContextID] == meta.StatusID {
		return verdict{ours: true}
	}
	v := verdict{owner: describeOwner(live)}
	v.adopt = meta.SyncPolicy.Adopt && ann[v1alpha1.AnnotationAdopt] == "true"
	return v
}

// describeOwner names who holds an object: an Argus deployment by its
// owner annotation, a Helm release, or the field managers that wrote it.
func describeOwner(live metav1.Object) string {
	ann, labels := live.GetAnnotations(), live.GetLabels()
	if o := ann[v1alpha1.AnnotationOwner]; o != "" {
		return DescribeGroup(o)
	}
	if id := labels[v1alpha1.LabelContextID]; id != "" {
		return "Argus context " + id
	}
	if rel := ann["meta.helm.sh/release-name"]; rel != "" {
		return "Helm release " + ann["meta.helm.sh/release-namespace"] + "/" + rel
	}
	seen := map[string]bool{}
	var managers []string
	for _, m := range live.GetManagedFields() {
		if m.Manager != "" && !seen[m.Manager] {
			seen[m.Manager] = true
			managers = append(managers, m.Manager)
		}
	}
	sort.Strings(managers)
	if len(managers) == 0 {
		return "no Argus deployment (created outside Argus)"
	}
	return "no Argus deployment (written by " + strings.Join(managers, ", ") + ")"
}

// DescribeGroup names a group for people: "deployment intent group
// p/ca/v/dig", "v1 instance 123".
func DescribeGroup(group string) string {
	kind, rest, _ := strings.Cut(group, ":")
	switch kind {
	case "dig":
		return "deployment intent group " + rest
	case "instance":
		return "v1 instance " + rest
	case "lc":
		return "logical cloud " + rest
	case "cluster":
		return "the network intents of cluster " + rest
	}
	return group
}

// guarded reports whether rsync checks who owns an object before applying
// over it: for deployment intent groups and v1 instances. A cluster's
// network intents take their networks over, as EMCO's ncm does; a logical
// cloud's objects live in its namespace, which is Exclusive (claim): never
// taken over, so nothing of the cloud lands in another's.
func guarded(meta appcontext.Meta) bool {
	return strings.HasPrefix(meta.Group, "dig:") || strings.HasPrefix(meta.Group, "instance:")
}

// liveMeta reads an object's metadata (the metadata client when there is
// one: nothing but metadata crosses the wire); nil when it does not exist.
func (e *Engine) liveMeta(ctx context.Context, cs *clusterState, t target, name string) (metav1.Object, error) {
	if !cs.acquire(ctx) {
		return nil, ctx.Err()
	}
	defer cs.release()
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	var obj metav1.Object
	var err error
	if t.client.Metadata != nil {
		var m *metav1.PartialObjectMetadata
		if t.namespace == "" {
			m, err = t.client.Metadata.Resource(t.gvr).Get(rctx, name, metav1.GetOptions{})
		} else {
			m, err = t.client.Metadata.Resource(t.gvr).Namespace(t.namespace).Get(rctx, name, metav1.GetOptions{})
		}
		obj = m
	} else {
		var u *unstructured.Unstructured
		u, err = t.ri.Get(rctx, name, metav1.GetOptions{})
		obj = u
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// checkOwner decides whether the resource may be applied: an object that
// is not there, or is the group's, may; another's may only be adopted.
// It returns who the object is adopted from ("" when it is not adopted).
func (pa *placementApply) checkOwner(ctx context.Context, cs *clusterState, t target, obj *unstructured.Unstructured) (string, error) {
	live, err := pa.e.liveMeta(ctx, cs, t, obj.GetName())
	if err != nil || live == nil {
		return "", err
	}
	v := judge(live, pa.c.Meta)
	switch {
	case v.ours:
		return "", nil
	case v.adopt:
		return v.owner, nil
	}
	return "", errOwned{owner: v.owner, group: pa.c.Meta.Group}
}

// claim creates an Exclusive object, or makes sure the one that exists is
// the group's (judge: its owner annotation or its status context's label;
// never adopted). Create is what makes it race-free: of two claimants (or
// a claimant and a person) only one creates. The apply that follows sets
// the object's fields.
func (pa *placementApply) claim(ctx context.Context, cs *clusterState, t target, obj *unstructured.Unstructured) error {
	err := pa.e.create(ctx, cs, t, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	live, err := pa.e.liveMeta(ctx, cs, t, obj.GetName())
	if err != nil {
		return err
	}
	if live == nil { // deleted since: the next attempt creates it
		return apierrors.NewConflict(t.gvr.GroupResource(), obj.GetName(), errors.New("deleted while it was claimed"))
	}
	if v := judge(live, pa.c.Meta); !v.ours {
		return errOwned{owner: v.owner, group: pa.c.Meta.Group, exclusive: fmt.Sprintf("%s %q", obj.GetKind(), obj.GetName())}
	}
	return nil
}

// create creates obj as rsync's field manager.
func (e *Engine) create(ctx context.Context, cs *clusterState, t target, obj *unstructured.Unstructured) error {
	if !cs.acquire(ctx) {
		return ctx.Err()
	}
	defer cs.release()
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	_, err := t.ri.Create(rctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	return err
}

// needsOwnerCheck: rsync reads the object before applying it unless the
// group applied it before in this context (it is then the group's, and
// the object is not read again: updates cost one request per object).
// Heals always check: the object may be another's since it went.
func (pa *placementApply) needsOwnerCheck(st appcontext.ResourceStatus) bool {
	if !guarded(pa.c.Meta) {
		return false
	}
	return pa.heal != nil || st.Status != appcontext.RsyncApplied
}

// consumeAdopt removes the adoption permission from an object rsync just
// adopted: it was given once, to the group that took the object.
func (e *Engine) consumeAdopt(ctx context.Context, cs *clusterState, t target, name string) error {
	if !cs.acquire(ctx) {
		return ctx.Err()
	}
	defer cs.release()
	rctx, cancel := context.WithTimeout(ctx, e.opts.RequestTimeout)
	defer cancel()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, v1alpha1.AnnotationAdopt)
	_, err := t.ri.Patch(rctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager + "-adopt"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// deletable reads the object and reports whether it is the context's to
// delete, and its uid (the delete is made conditional on it, so an object
// replaced meanwhile is not deleted); an object already gone is done.
func (e *Engine) deletable(ctx context.Context, cs *clusterState, t target, c *appcontext.Context, name string) (types.UID, string, error) {
	live, err := e.liveMeta(ctx, cs, t, name)
	if err != nil || live == nil {
		return "", "", err
	}
	if v := judge(live, c.Meta); !v.ours {
		return "", v.owner, nil
	}
	return live.GetUID(), "", nil
}
