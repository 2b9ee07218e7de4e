package status

import (
	"cmp"
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// Overview is every deployment intent group and v1 instance with a summary
// of its state: what GET /v2/overview answers, and what the console's
// first page shows.
type Overview struct {
	DeploymentIntentGroups []Summary `json:"deploymentIntentGroups"`
	Instances              []Summary `json:"instances"`
}

// Summary is one DIG or v1 instance at a glance.
type Summary struct {
	// Kind is "dig" or "instance".
	Kind string `json:"kind"`
	// Project, CompositeApp, Version and Name name a DIG; ID and the
	// request's names an instance (Name is its release name).
	Project      string `json:"project,omitempty"`
	CompositeApp string `json:"compositeApp,omitempty"`
	Version      string `json:"compositeAppVersion,omitempty"`
	Name         string `json:"name"`
	ID           string `json:"id,omitempty"`
	RBName       string `json:"rb-name,omitempty"`
	RBVersion    string `json:"rb-version,omitempty"`
	ProfileName  string `json:"profile-name,omitempty"`
	CloudRegion  string `json:"cloud-region,omitempty"`
	// StatusURL is the subject's status resource; …/history and the
	// subscriptions hang below it.
	StatusURL string `json:"status-url"`
	// State is the DIG's lifecycle state (Created, Approved,
	// Instantiated…); Status the current context's (Instantiating…).
	State    string `json:"state,omitempty"`
	Status   string `json:"status,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Ready is true when every resource is Ready; ReadyStatus is the
	// aggregate (Ready, Pending, Failed, Unknown), "" with no context.
	Ready       bool           `json:"ready"`
	ReadyStatus string         `json:"ready-status,omitempty"`
	ReadyCounts map[string]int `json:"ready-counts"`
	Total       int            `json:"total"`
	ReadyCount  int            `json:"ready-count"`
	Apps        []AppSummary   `json:"apps"`
	// NotReady lists what is not Ready, at most MaxNotReady of them;
	// NotReadyCount says how many there are.
	NotReady      []NotReady `json:"not-ready"`
	NotReadyCount int        `json:"not-ready-count"`
	// SyncCounts counts the resources by sync state (desired against live).
	SyncCounts map[string]int `json:"sync-counts"`
}

// MaxNotReady bounds the not-ready resources one Summary lists.
const MaxNotReady = 20

// AppSummary is one app's readiness per cluster.
type AppSummary struct {
	Name     string           `json:"name"`
	Ready    bool             `json:"ready"`
	Clusters []ClusterSummary `json:"clusters"`
}

// ClusterSummary is one app on one cluster.
type ClusterSummary struct {
	ClusterProvider string `json:"cluster-provider"`
	Cluster         string `json:"cluster"`
	Ready           bool   `json:"ready"`
	ReadyStatus     string `json:"ready-status"`
	Total           int    `json:"total"`
	ReadyCount      int    `json:"ready-count"`
	Connectivity    string `json:"connectivity,omitempty"`
	Monitor         string `json:"monitor,omitempty"`
	// Drifted counts its resources OutOfSync or Missing.
	Drifted int `json:"drifted,omitempty"`
}

// NotReady is one resource that is not Ready, and why.
type NotReady struct {
	App             string `json:"app"`
	ClusterProvider string `json:"cluster-provider"`
	Cluster         string `json:"cluster"`
	GVK             GVK    `json:"GVK"`
	Name            string `json:"name"`
	ClusterStatus   string `json:"cluster-status,omitempty"`
	ReadyStatus     string `json:"ready-status"`
	Reason          string `json:"reason,omitempty"`
}

// Overview summarises every DIG and v1 instance. With the mirror it costs
// no store read at all (the DIGs, instances and lifecycles, and the
// contexts, are in memory); without, one catalogue listing per kind and
// one state read per DIG.
func (r *Reader) Overview(ctx context.Context) (Overview, error) {
	if r.Mirror != nil && r.Cache != nil {
		return r.mirroredOverview(ctx)
	}
	out := Overview{DeploymentIntentGroups: []Summary{}, Instances: []Summary{}}
	err := catalog.For[catalog.DIGSpec](r.Catalog, catalog.DeploymentIntentGroups).Each(ctx, func(dig catalog.Key, obj catalog.Object[catalog.DIGSpec]) error {
		st, err := r.Catalog.GetDIGState(ctx, dig)
		if err != nil {
			return err
		}
		s, err := r.digSummary(ctx, dig, obj.Spec.CompositeProfile, st)
		if err != nil {
			return err
		}
		out.DeploymentIntentGroups = append(out.DeploymentIntentGroups, s)
		return nil
	})
	if err != nil {
		return Overview{}, err
	}
	err = catalog.For[catalog.InstanceSpec](r.Catalog, catalog.Instances).Each(ctx, func(key catalog.Key, obj catalog.Object[catalog.InstanceSpec]) error {
		s, err := r.instanceSummary(ctx, key[0], obj.Spec.ReleaseName, obj.Spec.Request)
		if err != nil {
			return err
		}
		out.Instances = append(out.Instances, s)
		return nil
	})
	if err != nil {
		return Overview{}, err
	}
	return out, nil
}

// mirroredOverview is Overview from memory, once the cache (which feeds
// the mirror) is loaded.
func (r *Reader) mirroredOverview(ctx context.Context) (Overview, error) {
	if err := r.Cache.WaitLoaded(ctx); err != nil {
		return Overview{}, err
	}
	digs, instances := r.Mirror.DIGs(), r.Mirror.Instances()
	out := Overview{DeploymentIntentGroups: make([]Summary, 0, len(digs)), Instances: make([]Summary, 0, len(instances))}
	for _, d := range digs {
		ms := r.Mirror.State(d.Group)
		st := catalog.DIGState{Current: ms.Current, ContextID: ms.ContextID, StatusContextID: ms.StatusContextID}
		s, err := r.digSummary(ctx, d.Key, d.CompositeProfile, st)
		if err != nil {
			return Overview{}, err
		}
		out.DeploymentIntentGroups = append(out.DeploymentIntentGroups, s)
	}
	for _, i := range instances {
		s, err := r.instanceSummary(ctx, i.ID, i.ReleaseName, i.Request)
		if err != nil {
			return Overview{}, err
		}
		out.Instances = append(out.Instances, s)
	}
	return out, nil
}

// digSummary summarises one DIG in state st.
func (r *Reader) digSummary(ctx context.Context, dig catalog.Key, profile string, st catalog.DIGState) (Summary, error) {
	s := Summary{Kind: "dig", Project: dig[0], CompositeApp: dig[1], Version: dig[2], Name: dig[3], State: st.Current,
		StatusURL: "/v2/projects/" + dig[0] + "/composite-apps/" + dig[1] + "/" + dig[2] + "/deployment-intent-groups/" + dig[3] + "/status"}
	header := Header{Project: dig[0], CompositeApp: dig[1], Version: dig[2], CompositeProfile: profile, Name: dig[3]}
	return s, r.summarise(ctx, header, st, st.ContextID, &s)
}

// instanceSummary summarises one v1 instance.
func (r *Reader) instanceSummary(ctx context.Context, id, release string, req catalog.InstanceRequest) (Summary, error) {
	s := Summary{Kind: "instance", ID: id, Name: release, RBName: req.RBName, RBVersion: req.RBVersion,
		ProfileName: req.ProfileName, CloudRegion: req.CloudRegion, StatusURL: "/v1/instance/" + id + "/status"}
	return s, r.summarise(ctx, Header{Name: id}, catalog.DIGState{}, id, &s)
}

// summarise fills s from the context's type=cluster answer, computed
// placement by placement as Build does, without building the answer (the
// overview summarises every subject at once). A context not (or no
// longer) stored leaves the summary without one.
func (r *Reader) summarise(ctx context.Context, header Header, st catalog.DIGState, id string, s *Summary) error {
	s.ReadyCounts, s.Apps, s.NotReady, s.SyncCounts = map[string]int{}, []AppSummary{}, []NotReady{}, map[string]int{}
	if id == "" {
		return nil
	}
	err := r.withInput(ctx, header, st, id, func(in Input) { summaryOf(in, s) })
	if err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// summaryOf fills s from in's context as its type=cluster answer counts it.
func summaryOf(in Input, s *Summary) {
	if in.Context == nil {
		return
	}
	s.Instance, s.Status = in.Context.Meta.ID, in.Context.Status.Status
	q := Query{Type: TypeCluster, Output: OutputSummary}
	ready, worst := true, health.Ready
	for _, p := range in.Context.Placements {
		if left(p) {
			continue
		}
		if n := len(s.Apps); n == 0 || s.Apps[n-1].Name != p.App { // placements are sorted by app
			s.Apps = append(s.Apps, AppSummary{Name: p.App, Ready: true})
		}
		as := &s.Apps[len(s.Apps)-1]
		cs := s.summariseCluster(p.App, buildCluster(in, q, p, nil))
		as.Clusters = append(as.Clusters, cs)
		as.Ready = as.Ready && cs.Ready
		ready = ready && cs.Ready
		if cs.Total > 0 { // the worst of every resource is the worst of the clusters'
			worst = health.Aggregate(worst, health.Status(cs.ReadyStatus))
		}
	}
	s.Ready = ready && len(s.Apps) > 0
	if s.Total > 0 {
		s.ReadyStatus = string(worst)
	}
	s.NotReady = worstFirst(s.NotReady, MaxNotReady) // the worst are kept
}

// summariseCluster counts one app's resources on one cluster into s and
// returns the cluster's summary.
func (s *Summary) summariseCluster(app string, c Cluster) ClusterSummary {
	cs := ClusterSummary{ClusterProvider: c.ClusterProvider, Cluster: c.Cluster, Ready: c.Ready != nil && *c.Ready,
		Connectivity: c.Connectivity, Monitor: c.Monitor}
	worst := health.Ready
	for _, res := range c.Resources {
		cs.Total++
		s.ReadyCounts[res.ReadyStatus]++
		if res.SyncStatus != "" {
			s.SyncCounts[res.SyncStatus]++
		}
		if syncstate.Drifted(res.RsyncStatus, res.SyncStatus) { // buildCluster keeps the rsync status
			cs.Drifted++
		}
		worst = health.Aggregate(worst, health.Status(res.ReadyStatus))
		if res.ReadyStatus == string(health.Ready) {
			cs.ReadyCount++
			continue
		}
		s.NotReadyCount++
		s.NotReady = append(s.NotReady, NotReady{App: app, ClusterProvider: c.ClusterProvider, Cluster: c.Cluster,
			GVK: res.GVK, Name: res.Name, ClusterStatus: res.ClusterStatus, ReadyStatus: res.ReadyStatus, Reason: res.Reason})
	}
	if cs.Total > 0 {
		cs.ReadyStatus = string(worst)
	}
	s.Total += cs.Total
	s.ReadyCount += cs.ReadyCount
	return cs
}

// ClusterOverview is every registered cluster (and v1 cloud region) with
// its connectivity, monitor and watcher: GET /v2/overview/clusters.
type ClusterOverview struct {
	// Replica names the orchestrator replica that answered, so a client
	// can tell the watchers it runs from those of other replicas.
	Replica  string         `json:"replica"`
	Clusters []ClusterState `json:"clusters"`
}

// ClusterState is one cluster as the watchers see it.
type ClusterState struct {
	ClusterProvider string `json:"cluster-provider"`
	Cluster         string `json:"cluster"`
	// Connectivity and Monitor are Unknown while no watcher has reported
	// (no live context places anything on the cluster).
	Connectivity string `json:"connectivity"`
	Monitor      string `json:"monitor"`
	LastSeen     string `json:"last-seen,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Contexts counts the live (not terminated) contexts on the cluster.
	Contexts int `json:"contexts"`
	// WatcherOwner names the replica that watches the cluster, "" when
	// none does.
	WatcherOwner string `json:"watcher-owner,omitempty"`
}

// WatcherOwners says which replica watches a cluster ("" for none).
type WatcherOwners interface {
	WatcherOwner(ref appcontext.ClusterRef) string
}

// ClusterOverview lists the clusters with their states.
func (r *Reader) ClusterOverview(ctx context.Context, replica string, owners WatcherOwners) (ClusterOverview, error) {
	out := ClusterOverview{Replica: replica, Clusters: []ClusterState{}}
	var refs []appcontext.ClusterRef
	err := catalog.For[catalog.Empty](r.Catalog, catalog.Clusters).Each(ctx, func(key catalog.Key, _ catalog.Object[catalog.Empty]) error {
		refs = append(refs, appcontext.ClusterRef{Provider: key[0], Name: key[1]})
		return nil
	})
	if err != nil {
		return out, err
	}
	err = catalog.For[catalog.ConnectivitySpec](r.Catalog, catalog.ConnectivityInfos).Each(ctx, func(key catalog.Key, _ catalog.Object[catalog.ConnectivitySpec]) error {
		refs = append(refs, appcontext.ClusterRef{Provider: appcontext.V1Provider, Name: key[0]})
		return nil
	})
	if err != nil {
		return out, err
	}
	var states map[appcontext.ClusterRef]appcontext.ClusterState
	if r.Cache != nil {
		if states, err = r.Cache.ClusterStates(ctx); err != nil {
			return out, err
		}
	} else if states, err = r.Contexts.ClusterStates(ctx); err != nil {
		return out, err
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	silent := cmp.Or(r.SilentAfter, appcontext.DefaultSilentAfter)
	for _, ref := range refs {
		cs := ClusterState{ClusterProvider: ref.Provider, Cluster: ref.Name, Connectivity: Unknown, Monitor: Unknown}
		if st, ok := states[ref]; ok {
			cs.Connectivity, cs.Monitor, cs.Reason = st.Connectivity, st.Monitor, st.Reason
			if st.UnusableReason != "" {
				cs.Reason = st.UnusableReason
			}
			if !st.LastSeen.IsZero() {
				cs.LastSeen = st.LastSeen.UTC().Format(time.RFC3339)
			}
			if st.Monitor == appcontext.MonitorRunning && !st.Agent && now.Sub(st.LastSeen) > silent {
				cs.Monitor = appcontext.MonitorSilent
			}
		}
		if r.Cache != nil {
			live, err := r.Cache.LiveOn(ctx, ref)
			if err != nil {
				return out, err
			}
			cs.Contexts = len(live)
		}
		if owners != nil {
			cs.WatcherOwner = owners.WatcherOwner(ref)
		}
		out.Clusters = append(out.Clusters, cs)
	}
	sort.Slice(out.Clusters, func(i, j int) bool {
		a, b := out.Clusters[i], out.Clusters[j]
		return strings.Compare(a.ClusterProvider+"+"+a.Cluster, b.ClusterProvider+"+"+b.Cluster) < 0
	})
	return out, nil
}

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

// worstFirst keeps the max worst of what is not Ready: Failed, then
// NotPresent, then Pending and Terminating, then Unknown (a Pending
// Deployment never hides its Failed pod), each in answer order.
func worstFirst(l []NotReady, max int) []NotReady {
	rank := func(s string) int {
		switch health.Status(s) {
		case health.Failed:
			return 0
		case health.NotPresent:
			return 1
		case health.Pending, health.Terminating:
			return 2
		}
		return 3
	}
	sort.SliceStable(l, func(i, j int) bool { return rank(l[i].ReadyStatus) < rank(l[j].ReadyStatus) })
	if len(l) > max {
		l = l[:max]
	}
	return l
}
