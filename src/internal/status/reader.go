package status

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/health"
)

// Reader answers status queries from the stores: per query one catalogue
// read for the state, one etcd transaction for the context (resources,
// rsync statuses and bundle snapshots) and one range read for the
// clusters' states.
type Reader struct {
	Catalog  *catalog.Catalog
	Contexts *appcontext.Store
	// Cache, when set, answers DIG and cluster queries from memory; a
	// context it has not seen yet (just created) is read from etcd.
	Cache *appcontext.Cache
	// SilentAfter as the watchers use it; 0 means 30s.
	SilentAfter time.Duration
	Now         func() time.Time
	// Clusters answers the v1 queries, which read the cluster itself as
	// k8splugin's do; nil leaves them unavailable.
	Clusters Clusters
	// Mirror, with Cache, answers the overview from memory: the DIGs,
	// instances and lifecycles as the catalogue's index has them, fed by
	// the cache's watch (Cache.Follow). Nil lists them from the catalogue.
	Mirror *catalog.Mirror
	// Manifests loads the rendered manifests of type=rsync output=detail
	// answers (the cache keeps references only); nil leaves those details
	// out of answers from the cache.
	Manifests ManifestSource

	// summaries and feeds keep output=summary answers' per-placement
	// counts and notification entries between answers (memo.go).
	summaries memo[summaryState]
	feeds     memo[entriesState]
}

// base is an Input without a context.
func (r *Reader) base(header Header, st catalog.DIGState) Input {
	in := Input{Header: header, State: st.Actions, StatusID: st.StatusContextID, Now: time.Now(), SilentAfter: r.SilentAfter}
	if r.Now != nil {
		in.Now = r.Now()
	}
	if in.SilentAfter == 0 {
		in.SilentAfter = appcontext.DefaultSilentAfter
	}
	return in
}

// input reads a context and the cluster states from etcd.
func (r *Reader) input(ctx context.Context, header Header, st catalog.DIGState, contextID string) (Input, error) {
	in := r.base(header, st)
	if contextID == "" {
		return in, nil
	}
	c, err := r.Contexts.Get(ctx, contextID)
	if err != nil {
		return in, err
	}
	in.Context = c
	in.Clusters, err = r.Contexts.ClusterStates(ctx)
	return in, err
}

// Instances is the answer to a bare ?instance: the DIG's contexts.
type Instances struct {
	Name         string   `json:"name"`
	Project      string   `json:"project"`
	CompositeApp string   `json:"composite-app-name"`
	Version      string   `json:"composite-app-version"`
	Instances    []string `json:"instances"`
}

// DIG answers GET .../deployment-intent-groups/{dig}/status.
func (r *Reader) DIG(ctx context.Context, dig catalog.Key, v url.Values) (any, error) {
	q, err := ParseQuery(v)
	if err != nil {
		return nil, err
	}
	header, st, err := r.digHeader(ctx, dig)
	if err != nil {
		return nil, err
	}
	if q.ListInstances {
		ids := append([]string{}, st.Contexts...)
		return Instances{Name: dig[3], Project: dig[0], CompositeApp: dig[1], Version: dig[2], Instances: ids}, nil
	}
	id, err := pickInstance(st, q, "deployment intent group")
	if err != nil {
		return nil, err
	}
	if q.ListApps || q.ListClusters || q.ListResources {
		return r.lists(ctx, header, st, id, q)
	}
	return r.build(ctx, header, st, id, q)
}

func (r *Reader) digHeader(ctx context.Context, dig catalog.Key) (Header, catalog.DIGState, error) {
	obj, err := catalog.For[catalog.DIGSpec](r.Catalog, catalog.DeploymentIntentGroups).Get(ctx, dig)
	if err != nil {
		return Header{}, catalog.DIGState{}, err
	}
	st, err := r.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return Header{}, catalog.DIGState{}, err
	}
	return Header{Project: dig[0], CompositeApp: dig[1], Version: dig[2], CompositeProfile: obj.Spec.CompositeProfile, Name: dig[3]}, st, nil
}

// pickInstance is the context a query is about: ?instance=<id>, which
// must be one of the group's, or the current one.
func pickInstance(st catalog.DIGState, q Query, what string) (string, error) {
	if q.Instance == "" {
		return st.ContextID, nil
	}
	if !slices.Contains(st.Contexts, q.Instance) {
		return "", errdefs.NotFound("instance %s is not one of this %s's", q.Instance, what)
	}
	return q.Instance, nil
}

// build answers from the cache when it has the context, else from etcd.
// Details are deferred: WriteJSON (or Resolve) builds them, outside the
// cache's lock, one at a time.
func (r *Reader) build(ctx context.Context, header Header, st catalog.DIGState, id string, q Query) (Response, error) {
	var resp Response
	err := r.withFilteredInput(ctx, header, st, id, q, func(in Input) {
		in.deferDetail = true
		if q.Output == OutputSummary && in.cached {
			in.summaries = r.summaries.state(id, q, newSummaryState(q.Type))
		}
		resp = Build(in, q)
	})
	resp.contextID, resp.manifests = id, r.Manifests
	return resp, err
}

// withFilteredInput is withInput for a query whose app filter must name
// apps of the context (knownApps): f is not called when one does not.
func (r *Reader) withFilteredInput(ctx context.Context, header Header, st catalog.DIGState, id string, q Query, f func(Input)) error {
	var unknown error
	err := r.withInput(ctx, header, st, id, func(in Input) {
		if unknown = knownApps(in, q.Apps); unknown == nil {
			f(in)
		}
	})
	if err == nil {
		err = unknown
	}
	return err
}

// knownApps refuses an app filter naming an app the context does not
// have, as EMCO does (400): a filter that matched nothing would answer
// NotReady for a deployment that is all Ready.
func knownApps(in Input, filter []string) error {
	if in.Context == nil || len(filter) == 0 {
		return nil
	}
	have := map[string]bool{}
	var names []string
	for _, p := range in.Context.Placements {
		if !have[p.App] {
			have[p.App] = true
			names = append(names, p.App)
		}
	}
	for _, a := range filter {
		if !have[a] {
			sort.Strings(names)
			return errdefs.Invalid("app %q is not an app of this deployment (its apps: %s)", a, strings.Join(names, ", "))
		}
	}
	return nil
}

// withInput calls f with the input of context id (none when id is ""):
// from the cache when it has the context, else read from etcd. f must not
// keep the input.
func (r *Reader) withInput(ctx context.Context, header Header, st catalog.DIGState, id string, f func(Input)) error {
	return r.withInputE(ctx, header, EMCOHeader{}, st, id, f)
}

// withInputE is withInput with the EMCO header set too.
func (r *Reader) withInputE(ctx context.Context, header Header, emco EMCOHeader, st catalog.DIGState, id string, f func(Input)) error {
	g := f
	f = func(in Input) {
		in.EMCO = emco
		g(in)
	}
	if r.Cache != nil && id != "" {
		found := false
		err := r.Cache.ViewGen(ctx, id, func(cx *appcontext.Context, clusters map[appcontext.ClusterRef]appcontext.ClusterState, gen uint64) {
			if cx == nil {
				return
			}
			found = true
			in := r.base(header, st)
			in.Context, in.Clusters, in.cached, in.clusterGen = cx, clusters, true, gen
			f(in)
		})
		if err != nil || found {
			return err
		}
	}
	in, err := r.input(ctx, header, st, id)
	if err != nil {
		return err
	}
	f(in)
	return nil
}

// Cluster answers GET /v2/cluster-providers/{cp}/clusters/{c}/status: the
// cluster's network intents as the single pseudo-app network-intents.
func (r *Reader) Cluster(ctx context.Context, provider, name string, v url.Values) (any, error) {
	q, err := ParseQuery(v)
	if err != nil {
		return nil, err
	}
	if _, err := catalog.For[catalog.Empty](r.Catalog, catalog.Clusters).Get(ctx, catalog.Key{provider, name}); err != nil {
		return nil, err
	}
	st, err := r.Catalog.GetState(ctx, catalog.ClusterGroup(provider, name))
	if err != nil {
		return nil, err
	}
	if q.ListInstances {
		return Instances{Name: provider + "+" + name, Instances: append([]string{}, st.Contexts...)}, nil
	}
	id, err := pickInstance(st, q, "cluster")
	if err != nil {
		return nil, err
	}
	header := Header{Name: provider + "+" + name}
	if q.ListApps || q.ListClusters || q.ListResources {
		return r.lists(ctx, header, st, id, q)
	}
	resp, err := r.build(ctx, header, st, id, q)
	if err == nil && len(resp.Apps) > 0 && len(resp.Apps[0].Clusters) > 0 {
		c := resp.Apps[0].Clusters[0]
		resp.Cluster = &c // EMCO's ClusterStatusResult names its one cluster
	}
	return resp, err
}

// InstanceStatus is GET /v1/instance/{id}/status (k8splugin's shape).
type InstanceStatus struct {
	Request         catalog.InstanceRequest `json:"request"`
	Ready           bool                    `json:"ready"`
	ResourceCount   int                     `json:"resourceCount"`
	ResourcesStatus []ResourceStatus        `json:"resourcesStatus"`
	// SyncCounts (an Argus addition) counts the resources by sync state.
	SyncCounts map[string]int `json:"syncCounts,omitempty"`
}

// ResourceStatus is one resource of an instance. SyncStatus and
// SyncReason are Argus additions (pods have none).
type ResourceStatus struct {
	Name        string          `json:"name"`
	GVK         GVK             `json:"GVK"`
	Status      json.RawMessage `json:"status"`
	ReadyStatus string          `json:"ready-status"`
	Reason      string          `json:"reason,omitempty"`
	SyncStatus  string          `json:"syncStatus,omitempty"`
	SyncReason  string          `json:"syncReason,omitempty"`
}

// instance reads a v1 instance and calls f with its input (from the cache
// when it has the context); f must not keep the input.
func (r *Reader) instance(ctx context.Context, id string, f func(Input)) (catalog.InstanceSpec, error) {
	inst, err := catalog.For[catalog.InstanceSpec](r.Catalog, catalog.Instances).Get(ctx, catalog.Key{id})
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	return inst.Spec, r.withInput(ctx, Header{Name: id}, catalog.DIGState{}, id, f)
}

// allReady: something to be ready, and all of it Ready.
func allReady(statuses []health.Status) bool {
	return len(statuses) > 0 && health.Aggregate(statuses...) == health.Ready
}

// Instance answers a v1 instance's status. A resource the cluster side
// cannot tell about is reported Unknown with the reason, never as an error
// for the whole call.
func (r *Reader) Instance(ctx context.Context, id string) (InstanceStatus, error) {
	out := InstanceStatus{ResourcesStatus: []ResourceStatus{}}
	var statuses []health.Status
	spec, err := r.instance(ctx, id, func(in Input) {
		resp := Build(in, Query{Type: TypeCluster, Output: OutputDetail})
		if in.Context != nil {
			out.SyncCounts = resp.SyncCounts
		}
		for _, a := range resp.Apps {
			for _, c := range a.Clusters {
				for _, res := range c.Resources {
					obj := res.Detail
					if obj == nil {
						obj = json.RawMessage(`{}`)
					}
					out.ResourcesStatus = append(out.ResourcesStatus, ResourceStatus{Name: res.Name, GVK: res.GVK, Status: obj,
						ReadyStatus: res.ReadyStatus, Reason: res.Reason, SyncStatus: res.SyncStatus, SyncReason: res.SyncReason})
					statuses = append(statuses, health.Status(res.ReadyStatus))
				}
			}
		}
	})
	if err != nil {
		return InstanceStatus{}, err
	}
	out.Request = spec.Request
	out.ResourceCount = len(out.ResourcesStatus)
	out.Ready = allReady(statuses)
	return out, nil
}

// Drifted lists what drifted in a context (see Drift), filtered by the
// app, cluster and resource values of filter; an unknown context is
// ErrNotFound.
func (r *Reader) Drifted(ctx context.Context, id string, filter url.Values) ([]appcontext.Drifted, error) {
	q, err := ParseQuery(url.Values{"app": filter["app"], "cluster": filter["cluster"], "resource": filter["resource"]})
	if err != nil {
		return nil, err
	}
	var out []appcontext.Drifted
	err = r.withInput(ctx, Header{}, catalog.DIGState{}, id, func(in Input) { out = Drift(in, q) })
	return out, err
}
