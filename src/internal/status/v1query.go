package status

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/health"
)

// Clusters gives the v1 queries a client per cluster.
type Clusters interface {
	Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error)
}

// The v1 queries read the cluster: k8splugin's clients ask them for any
// kind, not only what the monitor tracks. They are bounded in time and
// size, and never return a Secret's data.
const (
	queryTimeout = 15 * time.Second
	queryLimit   = 500
	// queryMaxBytes bounds what one query reads from the cluster (the
	// cluster's answer; what is decoded from it is a few times more).
	queryMaxBytes = 16 << 20
)

// QueryStatus is GET /v1/query's answer (k8splugin's shape).
type QueryStatus struct {
	ResourceCount   int              `json:"resourceCount"`
	ResourcesStatus []ResourceStatus `json:"resourcesStatus"`
}

// v1Query is a parsed query: the kind is required, the rest filters.
type v1Query struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	selector  labels.Selector
}

func parseV1Query(v url.Values) (v1Query, error) {
	q := v1Query{namespace: v.Get("Namespace"), name: v.Get("Name")}
	apiVersion, kind := v.Get("ApiVersion"), v.Get("Kind")
	if apiVersion == "" {
		return q, errdefs.Invalid("Missing ApiVersion mandatory parameter")
	}
	if kind == "" {
		return q, errdefs.Invalid("Missing Kind mandatory parameter")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return q, errdefs.InvalidWrap(err, "ApiVersion")
	}
	q.gvk = gv.WithKind(kind)
	if q.selector, err = labels.Parse(v.Get("Labels")); err != nil {
		return q, errdefs.InvalidWrap(err, "Labels")
	}
	return q, nil
}

// Query answers GET /v1/instance/{id}/query?ApiVersion=&Kind=&Name=&Labels=
// as k8splugin does: the objects of that kind in the instance's namespace
// on its cluster that carry its k8splugin.io/rb-instance-id label (unless
// Labels selects by that label already) and match the other filters.
func (r *Reader) Query(ctx context.Context, id string, v url.Values) (InstanceStatus, error) {
	q, err := parseV1Query(v)
	if err != nil {
		return InstanceStatus{}, err
	}
	inst, err := catalog.For[catalog.InstanceSpec](r.Catalog, catalog.Instances).Get(ctx, catalog.Key{id})
	if err != nil {
		return InstanceStatus{}, err
	}
	if !strings.Contains(strings.ToLower(v.Get("Labels")), v1alpha1.LabelRBInstanceID) {
		req, _ := labels.NewRequirement(v1alpha1.LabelRBInstanceID, "=", []string{id})
		q.selector = q.selector.Add(*req)
	}
	q.namespace = inst.Spec.Namespace
	list, err := r.list(ctx, appcontext.ClusterRef{Provider: appcontext.V1Provider, Name: inst.Spec.Request.CloudRegion}, q)
	if err != nil {
		return InstanceStatus{}, err
	}
	out := InstanceStatus{Request: inst.Spec.Request, ResourceCount: len(list), ResourcesStatus: list}
	statuses := make([]health.Status, 0, len(list))
	for _, s := range list {
		statuses = append(statuses, health.Status(s.ReadyStatus))
	}
	out.Ready = allReady(statuses)
	return out, nil
}

// RegionQuery answers GET /v1/query?CloudRegion=&Namespace=&ApiVersion=&Kind=&Name=&Labels=:
// the objects of a kind on a cloud region's cluster.
func (r *Reader) RegionQuery(ctx context.Context, v url.Values) (QueryStatus, error) {
	region := v.Get("CloudRegion")
	if region == "" {
		return QueryStatus{}, errdefs.Invalid("Missing CloudRegion mandatory parameter")
	}
	q, err := parseV1Query(v)
	if err != nil {
		return QueryStatus{}, err
	}
	if _, err := catalog.For[catalog.ConnectivitySpec](r.Catalog, catalog.ConnectivityInfos).Get(ctx, catalog.Key{region}); err != nil {
		return QueryStatus{}, err
	}
	list, err := r.list(ctx, appcontext.ClusterRef{Provider: appcontext.V1Provider, Name: region}, q)
	if err != nil {
		return QueryStatus{}, err
	}
	return QueryStatus{ResourceCount: len(list), ResourcesStatus: list}, nil
}

// list reads the objects a query selects from the cluster, at most
// queryLimit of them, sorted by namespace and name.
func (r *Reader) list(ctx context.Context, ref appcontext.ClusterRef, q v1Query) ([]ResourceStatus, error) {
	if r.Clusters == nil {
		return nil, errdefs.Unavailable(nil, "queries of the clusters are not available on this server")
	}
	client, err := r.Clusters.Client(ctx, ref)
	if err != nil {
		return nil, err
	}
	mapping, err := client.Mapper.RESTMapping(q.gvk.GroupKind(), q.gvk.Version)
	if meta.IsNoMatchError(err) {
		client.Mapper.Reset() // a CRD may have come since discovery was cached
		mapping, err = client.Mapper.RESTMapping(q.gvk.GroupKind(), q.gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, errdefs.Invalid("cloud region %s does not serve %s", ref.Name, q.gvk)
	}
	if err != nil {
		return nil, errdefs.Unavailable(err, "cloud region %s", ref.Name)
	}
	qctx, cancel := context.WithTimeout(cluster.WithMaxResponse(ctx, queryMaxBytes), queryTimeout)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: q.selector.String(), Limit: queryLimit}
	if q.name != "" {
		opts.FieldSelector = "metadata.name=" + q.name
	}
	ri := client.Dynamic.Resource(mapping.Resource)
	var list *unstructured.UnstructuredList
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		list, err = ri.Namespace(q.namespace).List(qctx, opts)
	} else {
		list, err = ri.List(qctx, opts)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || qctx.Err() != nil {
			return nil, errdefs.Unavailable(err, "cloud region %s did not answer in %s", ref.Name, queryTimeout)
		}
		if errors.Is(err, cluster.ErrAnswerTooLarge) {
			return nil, errdefs.Unavailable(nil, "the objects selected on cloud region %s are more than %d bytes; narrow the query (Name, Labels, Namespace)", ref.Name, queryMaxBytes)
		}
		return nil, errdefs.Unavailable(err, "list %s on cloud region %s", mapping.Resource.Resource, ref.Name)
	}
	out := make([]ResourceStatus, 0, len(list.Items))
	for i := range list.Items {
		o := &list.Items[i]
		res := health.Evaluate(o)
		out = append(out, ResourceStatus{Name: o.GetName(), GVK: GVK{q.gvk.Group, q.gvk.Version, q.gvk.Kind},
			Status: queryObject(o), ReadyStatus: string(res.Status), Reason: res.Reason})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// lastApplied is kubectl's (and Helm 2's) copy of an applied object: for a
// Secret, its data.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// queryObject is an object as a query returns it: without managed fields,
// and a Secret without its data, nor the annotation that copies it.
func queryObject(o *unstructured.Unstructured) json.RawMessage {
	c := o.DeepCopy()
	c.SetManagedFields(nil)
	if c.GetKind() == "Secret" && c.GroupVersionKind().Group == "" {
		delete(c.Object, "data")
		delete(c.Object, "stringData")
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations", lastApplied)
	}
	data, err := json.Marshal(c.Object)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return data
}
