package status

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// Cluster presence of a resource (SPEC section 4).
const (
	Present    = "Present"
	NotPresent = "NotPresent"
	Unknown    = "Unknown"
)

// Header is the identity part of a response.
type Header struct {
	Project          string `json:"project,omitempty"`
	CompositeApp     string `json:"composite-app-name,omitempty"`
	Version          string `json:"composite-app-version,omitempty"`
	CompositeProfile string `json:"composite-profile-name,omitempty"`
	Name             string `json:"name"`
}

// State is the lifecycle history, as EMCO renders it.
type State struct {
	Actions []catalog.StateAction `json:"Actions"`
}

// EMCOHeader is the identity as EMCO 22.x and later spell it.
type EMCOHeader struct {
	CompositeApp     string `json:"compositeApp,omitempty"`
	Version          string `json:"compositeAppVersion,omitempty"`
	CompositeProfile string `json:"compositeProfile,omitempty"`
	LogicalCloud     string `json:"logicalCloud,omitempty"`
}

// States is the lifecycle history in EMCO's current shape.
type States struct {
	StatusContextID string        `json:"statusctxid"`
	Actions         []StateAction `json:"actions"`
}

// StateAction is one entry of States.
type StateAction struct {
	State    string    `json:"state"`
	Instance string    `json:"instance"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision"`
}

// EMCO's ready vocabulary: a resource is Ready, NotReady or NotPresent.
const (
	EMCOReady    = "Ready"
	EMCONotReady = "NotReady"
)

// Response is a status answer (SPEC section 6): the seed fields, and
// beside them the fields EMCO f12558f answers with: states, deployedStatus
// and deployedCounts always; readyStatus and readyCounts, which need the
// clusters' view, for type=cluster (EMCO's status=ready).
type Response struct {
	Header
	EMCOHeader
	State           State  `json:"state"`
	States          States `json:"states"`
	Status          string `json:"status,omitempty"`
	DeployedStatus  string `json:"deployedStatus,omitempty"`
	ReadyStatusEMCO string `json:"readyStatus,omitempty"`
	// SyncCounts counts the resources by sync state (desired against live:
	// Synced, OutOfSync, Missing, Unknown); always present, pods never
	// counted (nothing desired of them).
	SyncCounts map[string]int `json:"syncCounts"`
	// StatusMessage and StatusReasons say what went wrong (or what rsync
	// still waits for): "1 of 9 resources failed, 1 waiting", and the first
	// resources' reasons.
	StatusMessage  string         `json:"status-message,omitempty"`
	StatusReasons  []string       `json:"status-reasons,omitempty"`
	DeployedCounts map[string]int `json:"deployedCounts,omitempty"`
	ReadyCounts    map[string]int `json:"readyCounts,omitempty"`
	RsyncStatus    map[string]int `json:"rsync-status,omitempty"`
	ClusterStatus  map[string]int `json:"cluster-status,omitempty"`
	// RsyncStatusEMCO and ClusterStatusEMCO are EMCO's camelCase spelling
	// of the same counts (its deprecated, still answered, fields).
	RsyncStatusEMCO   map[string]int `json:"rsyncStatus,omitempty"`
	ClusterStatusEMCO map[string]int `json:"clusterStatus,omitempty"`
	Ready             *bool          `json:"ready,omitempty"`
	ReadyStatus       map[string]int `json:"ready-status,omitempty"`
	Apps              []App          `json:"apps,omitempty"`
	// Cluster is the one cluster a cluster status answer is about (EMCO's
	// ClusterStatusResult).
	Cluster *Cluster `json:"cluster,omitempty"`
	// contextID and manifests load the details Build deferred (see
	// WriteJSON and Resolve).
	contextID string
	manifests ManifestSource
}

// App is one app's resources per cluster.
type App struct {
	Name     string    `json:"name"`
	Ready    *bool     `json:"ready,omitempty"`
	Clusters []Cluster `json:"clusters"`
}

// Cluster is one app's resources on one cluster. ClusterProviderEMCO and
// ReadyStatus are EMCO's spelling of the provider and of connectivity.
type Cluster struct {
	ClusterProvider     string     `json:"cluster-provider"`
	ClusterProviderEMCO string     `json:"clusterProvider"`
	Cluster             string     `json:"cluster"`
	Ready               *bool      `json:"ready,omitempty"`
	ReadyStatus         string     `json:"readyStatus,omitempty"`
	Connectivity        string     `json:"connectivity,omitempty"`
	Monitor             string     `json:"monitor,omitempty"`
	LastSeen            string     `json:"last-seen,omitempty"`
	Resources           []Resource `json:"resources"`
}

// GVK is EMCO's spelling.
type GVK struct {
	Group   string `json:"Group"`
	Version string `json:"Version"`
	Kind    string `json:"Kind"`
}

// Resource is one resource's status. DeployedStatus and ReadyStatusEMCO are
// EMCO's: the rsync status, and Ready/NotReady/NotPresent.
type Resource struct {
	GVK             GVK    `json:"GVK"`
	Name            string `json:"name"`
	Namespace       string `json:"namespace,omitempty"`
	RsyncStatus     string `json:"rsync-status,omitempty"`
	ClusterStatus   string `json:"cluster-status,omitempty"`
	ReadyStatus     string `json:"ready-status,omitempty"`
	Reason          string `json:"reason,omitempty"`
	DeployedStatus  string `json:"deployedStatus,omitempty"`
	ReadyStatusEMCO string `json:"readyStatus,omitempty"`
	// SyncStatus is desired against live (Synced, OutOfSync, Missing,
	// Unknown), SyncReason why it is not Synced; pods have none.
	SyncStatus string `json:"syncStatus,omitempty"`
	SyncReason string `json:"syncReason,omitempty"`
	// Heal says how often sync or self-heal re-applied it; AdoptedFrom who
	// held the object before rsync adopted it.
	Heal        *Heal  `json:"heal,omitempty"`
	AdoptedFrom string `json:"adoptedFrom,omitempty"`
	// RsyncStatusEMCO and ClusterStatusEMCO are EMCO's camelCase spelling
	// of rsync-status (type=rsync) and cluster-status (type=cluster).
	RsyncStatusEMCO   string `json:"rsyncStatus,omitempty"`
	ClusterStatusEMCO string `json:"clusterStatus,omitempty"`
	// Owners are the objects controlling it, nearest first (a Pod's
	// ReplicaSet, then its Deployment), from the bundle (type=cluster).
	Owners []Owner `json:"owners,omitempty"`
	// Warnings are the API server's about an applied object (type=rsync).
	Warnings []string        `json:"warnings,omitempty"`
	Detail   json.RawMessage `json:"detail,omitempty"`
	// fine is the ready status while the answer is built, whatever the
	// type (the seed field is dropped from rsync answers).
	fine string
	// entry or manifest is where a deferred Detail comes from: the bundle
	// entry (immutable once received) or the rendered manifest.
	entry    *appcontext.BundleEntry
	manifest *appcontext.Resource
	// since is when rsync last set its status (for history snapshots).
	since time.Time
}

// Heal is a resource's heal record as answers show it.
type Heal struct {
	Count int    `json:"count"`
	Last  string `json:"last"`
	By    string `json:"by"`
	Was   string `json:"was"`
	// Streak counts the heals in a row each undone soon after.
	Streak int `json:"streak,omitempty"`
}

// Input is everything a status answer is computed from.
type Input struct {
	Header Header
	EMCO   EMCOHeader
	State  []catalog.StateAction
	// StatusID is the lifecycle's status context id (EMCO's statusctxid).
	StatusID string
	Context  *appcontext.Context // nil before the first instantiation
	// Clusters are the watchers' cluster states.
	Clusters map[appcontext.ClusterRef]appcontext.ClusterState
	// Now and SilentAfter let a reader declare a monitor Silent even when
	// the replica watching it died before saying so.
	Now         time.Time
	SilentAfter time.Duration
	// formatTimes is false for summaries, which drop the clusters anyway.
	formatTimes bool
	// withRsync makes a type=cluster answer carry each resource's rsync
	// status too, for notification entries, which report both views.
	withRsync bool
	// summaries, for a context from the cache, keeps what each placement
	// adds to an output=summary answer between answers (memo.go).
	summaries *summaryState
	// cached says the context is the cache's: its placements stay the
	// same values across answers, as summaries needs.
	cached bool
	// clusterGen is the cache's generation of Clusters (0: not the
	// cache's): while it stays, the memo need not look up the state of an
	// agent's cluster again (memo.go).
	clusterGen uint64
	// deferDetail makes output=detail note where each detail comes from
	// rather than build it: the answer is then written a resource at a
	// time (WriteJSON), and only one detail is in memory at once.
	deferDetail bool
}

// Build computes the answer to q.
func Build(in Input, q Query) Response {
	in.formatTimes = q.Output != OutputSummary
	resp := Response{Header: in.Header, EMCOHeader: in.EMCO, State: State{Actions: in.State}, States: states(in.StatusID, in.State)}
	if resp.State.Actions == nil {
		resp.State.Actions = []catalog.StateAction{}
	}
	if resp.EMCOHeader.CompositeApp == "" {
		resp.EMCOHeader.CompositeApp, resp.EMCOHeader.Version, resp.EMCOHeader.CompositeProfile = in.Header.CompositeApp, in.Header.Version, in.Header.CompositeProfile
	}
	t := newTally(q.Type)
	allReady, nApps := true, 0
	if in.Context != nil {
		resp.Status = in.Context.Status.Status
		resp.DeployedStatus = in.Context.Status.Status
		resp.StatusMessage, resp.StatusReasons = in.Context.Status.Error, in.Context.Status.Reasons
		if q.Output == OutputSummary && in.summaries != nil {
			t, allReady, nApps = in.summaries.summarize(in, q)
		} else {
			resp.Apps, allReady = buildApps(in, q, t)
			nApps = len(resp.Apps)
		}
		if q.Type == TypeCluster {
			resp.ReadyStatusEMCO = EMCONotReady
			if t.allReady() {
				resp.ReadyStatusEMCO = EMCOReady
			}
		}
	}
	resp.SyncCounts = t.sync
	byType, emcoReady, presence, ready := t.byType, t.emcoReady, t.presence, t.ready
	resp.DeployedCounts, resp.ReadyCounts = byType, emcoReady
	if q.Type == TypeRsync {
		resp.RsyncStatus, resp.RsyncStatusEMCO = byType, byType
	} else {
		resp.ClusterStatus, resp.ClusterStatusEMCO, resp.ReadyStatus = presence, presence, ready
		resp.Ready = boolPtr(allReady && in.Context != nil && nApps > 0)
	}
	if q.Output == OutputSummary {
		resp.Apps = nil
	}
	return resp
}

// buildApps builds the context's apps as q asks, counting them in t, and
// says whether every app is ready (type=cluster).
func buildApps(in Input, q Query, t *tally) ([]App, bool) {
	var out []App
	allReady := true
	apps := map[string]*App{}
	var order []string
	// A summary counts each cluster as it is built and keeps none of
	// it, so its resources are built in one reused slice: at fleet
	// size (10,000 placements) the kept clusters were most of the
	// query's time and memory.
	summary := q.Output == OutputSummary
	var scratch []Resource
	appReady := map[string]bool{}
	inClusters := clusterMatcher(q.Clusters)
	for _, p := range in.Context.Placements {
		if !match(q.Apps, p.App) || !inClusters(p.Cluster) || left(p) {
			continue
		}
		c := buildCluster(in, q, p, scratch)
		if filteredOut(q, &c) {
			continue
		}
		a := apps[p.App]
		if a == nil {
			a = &App{Name: p.App}
			apps[p.App] = a
			order = append(order, p.App)
			appReady[p.App] = true
		}
		if summary {
			appReady[p.App] = t.add(&c) && appReady[p.App]
			scratch = c.Resources[:0]
			continue
		}
		a.Clusters = append(a.Clusters, c)
	}
	sort.Strings(order)
	for _, name := range order {
		a := apps[name]
		for i := range a.Clusters {
			c := &a.Clusters[i]
			appReady[name] = t.add(c) && appReady[name]
			c.strip(q.Type, in.withRsync)
		}
		if q.Type == TypeCluster {
			a.Ready = boolPtr(appReady[name])
			allReady = allReady && appReady[name]
		}
		out = append(out, *a)
	}
	return out, allReady
}

// filteredOut reports a cluster that q's resource or sync filter left
// without a resource: it is not part of the answer.
func filteredOut(q Query, c *Cluster) bool {
	return len(c.Resources) == 0 && len(q.Resources)+len(q.Sync) > 0
}

// left reports a placement an update removed whole and rsync has deleted:
// history, no longer part of the answer.
func left(p *appcontext.Placement) bool {
	for _, r := range p.Resources {
		if !r.Removed || p.StatusOf(r.Key()).Status != appcontext.RsyncDeleted {
			return false
		}
	}
	return len(p.Resources) > 0
}

// tally counts a DIG's resources as Build answers them.
type tally struct {
	typ                                      string
	byType, sync, ready, presence, emcoReady map[string]int
	// worst is the resources' statuses aggregated so far (Aggregate
	// keeps the worst), n how many.
	worst health.Status
	n     int
}

func newTally(typ string) *tally {
	return &tally{typ: typ, byType: map[string]int{}, sync: map[string]int{}, ready: map[string]int{},
		presence: map[string]int{}, emcoReady: map[string]int{}, worst: health.Ready}
}

// add counts c's resources and says whether c is ready (type=cluster).
func (t *tally) add(c *Cluster) bool {
	for i := range c.Resources {
		r := &c.Resources[i]
		if r.DeployedStatus != "" {
			t.byType[r.DeployedStatus]++
		}
		if r.SyncStatus != "" {
			t.sync[r.SyncStatus]++
		}
		if t.typ == TypeCluster {
			t.emcoReady[r.ReadyStatusEMCO]++
			t.worst = health.Aggregate(t.worst, health.Status(r.fine))
			t.n++
			t.ready[r.ReadyStatus]++
			t.presence[r.ClusterStatus]++
		}
	}
	return t.typ != TypeCluster || *c.Ready
}

// allReady: some resource, and every one Ready.
func (t *tally) allReady() bool { return t.n > 0 && t.worst == health.Ready }

// states renders the history in EMCO's shape: each action with the
// revision it made (an instantiation 1, each update or rollback the next)
// or the one in force. Actions recorded before revisions were are counted
// as EMCO counts them.
func states(statusID string, actions []catalog.StateAction) States {
	out := States{StatusContextID: statusID, Actions: make([]StateAction, 0, len(actions))}
	var rev int64
	for _, a := range actions {
		switch {
		case a.Revision > 0:
			rev = a.Revision
		case a.State == catalog.StateInstantiated:
			rev = 1
		case a.State == catalog.StateUpdated:
			rev++
		}
		out.Actions = append(out.Actions, StateAction{State: a.State, Instance: a.ContextID, Time: a.TimeStamp, Revision: rev})
	}
	return out
}

// emcoReadiness maps a ready status to EMCO's three values: anything not
// Ready (Unknown included) is NotReady, never a stale Ready.
func emcoReadiness(s string) string {
	switch health.Status(s) {
	case health.Ready:
		return EMCOReady
	case health.NotPresent:
		return string(health.NotPresent)
	}
	return EMCONotReady
}

// strip drops the rsync status from a cluster answer's seed fields unless
// asked (notification entries report both views).
func (c *Cluster) strip(typ string, withRsync bool) {
	for i := range c.Resources {
		r := &c.Resources[i]
		r.fine = ""
		if typ == TypeCluster && !withRsync {
			r.RsyncStatus = ""
		}
		if typ == TypeRsync {
			r.RsyncStatusEMCO = r.RsyncStatus
		} else {
			r.ClusterStatusEMCO = r.ClusterStatus
		}
	}
}

func buildCluster(in Input, q Query, p *appcontext.Placement, buf []Resource) Cluster {
	if buf == nil {
		buf = make([]Resource, 0, len(p.Resources))
	}
	c := Cluster{ClusterProvider: p.Cluster.Provider, ClusterProviderEMCO: p.Cluster.Provider, Cluster: p.Cluster.Name,
		Resources: buf[:0]}
	bundle, index := bundleOf(p)
	unknownWhy := clusterUnknown(in, p, bundle, &c)
	c.ReadyStatus = c.Connectivity
	var ownPods map[string]bool // pods the chart itself renders (hooks too): listed once, as resources
	for i := range p.Resources {
		r := &p.Resources[i] // not copied: a copy per resource escaped, most of a summary's allocations
		rs := p.StatusOf(r.Key())
		if r.GVK.Kind == "Pod" && r.GVK.Group == "" {
			if ownPods == nil {
				ownPods = map[string]bool{}
			}
			ownPods[or(r.Namespace, in.Context.Meta.Namespace)+"/"+r.Name] = true
		}
		if r.Removed && rs.Status == appcontext.RsyncDeleted {
			continue // an update removed it; it is history
		}
		if r.Hook != nil && (rs.Status == appcontext.RsyncPending || rs.Status == appcontext.RsyncDeleted) {
			continue // a Helm hook not run (yet), or gone as its delete policy says
		}
		if !matchResource(q.Resources, r.GVK.Kind, r.Name) {
			continue
		}
		res := Resource{GVK: GVK{r.GVK.Group, r.GVK.Version, r.GVK.Kind}, Name: r.Name, Namespace: r.Namespace,
			RsyncStatus: rs.Status, DeployedStatus: rs.Status, since: rs.Updated}
		if res.Namespace == "" && namespaced(r.GVK.Kind) {
			res.Namespace = in.Context.Meta.Namespace
		}
		e, found := lookup(index, r.GVK.Group, r.GVK.Kind, res.Namespace, r.Name)
		if r.Hook == nil { // a Helm hook runs at its events: nothing desired of it stays
			syncOf(&res, rs, bundle, e, found, unknownWhy, r.GVK.Group, r.GVK.Kind)
		}
		if len(q.Sync) > 0 && !match(q.Sync, res.SyncStatus) {
			continue
		}
		if q.Type == TypeRsync {
			// EMCO's status=deployed: no readiness, so no bundle lookups;
			// why rsync could not apply it, and what the API server warned of.
			res.Reason, res.Warnings = rs.Error, rs.Warnings
			if q.Output == OutputDetail {
				if len(r.Manifest) > 0 && !in.deferDetail {
					res.Detail = json.RawMessage(r.Manifest)
				} else {
					// A cached context holds references, not manifests.
					rc := *r // resolved outside the cache's lock: a copy
					res.manifest = &rc
				}
			}
			c.Resources = append(c.Resources, res)
			continue
		}
		if found {
			res.Namespace = e.Namespace // the cluster's word on scope
		}
		switch {
		case unknownWhy != "":
			res.ClusterStatus, res.ReadyStatus, res.Reason = Unknown, string(health.Unknown), unknownWhy
		case rs.Status == appcontext.RsyncFailed:
			// Not applied as rendered: whatever the cluster holds (an older
			// version, or nothing) is not what was asked for.
			res.ClusterStatus, res.ReadyStatus, res.Reason = NotPresent, string(health.Failed), "apply failed: "+or(rs.Error, "no reason recorded")
			if found {
				res.ClusterStatus = Present
			}
		case found:
			res.ClusterStatus, res.ReadyStatus, res.Reason = Present, e.ReadyStatus, e.Reason
		case rs.Status != appcontext.RsyncApplied && rs.Status != appcontext.RsyncDeleted:
			// Not in the cluster because rsync has not put it there (yet): say why.
			res.ClusterStatus, res.ReadyStatus, res.Reason = NotPresent, string(health.NotPresent), notApplied(rs)
		case unwatched(bundle, r.GVK.Group, r.GVK.Kind) != "":
			res.ClusterStatus, res.ReadyStatus, res.Reason = Unknown, string(health.Unknown), unwatched(bundle, r.GVK.Group, r.GVK.Kind)
		default:
			res.ClusterStatus, res.ReadyStatus, res.Reason = NotPresent, string(health.NotPresent), "not found in the cluster"
		}
		res.ReadyStatusEMCO, res.fine = emcoReadiness(res.ReadyStatus), res.ReadyStatus
		if q.Output == OutputDetail && found && unknownWhy == "" {
			res.setDetail(in, e)
		}
		c.Resources = append(c.Resources, res)
	}
	if q.Type == TypeCluster && unknownWhy == "" && bundle != nil && len(q.Sync) == 0 {
		// The pods of the app's workloads appear as resources of their own.
		for _, e := range podEntries(index) {
			if !matchResource(q.Resources, "Pod", e.Name) || ownPods[e.Namespace+"/"+e.Name] {
				continue
			}
			res := Resource{GVK: GVK{"", "v1", "Pod"}, Name: e.Name, Namespace: e.Namespace,
				ClusterStatus: Present, ReadyStatus: e.ReadyStatus, Reason: e.Reason, ReadyStatusEMCO: emcoReadiness(e.ReadyStatus), fine: e.ReadyStatus}
			if q.Output == OutputDetail {
				res.setDetail(in, e)
			}
			c.Resources = append(c.Resources, res)
		}
	}
	if q.Type == TypeCluster && index != nil && unknownWhy == "" {
		linkOwners(c.Resources, index)
	}
	if q.Type == TypeCluster {
		// fine is the readiness as listed, after linkOwners where it ran.
		worst := health.Ready
		for i := range c.Resources {
			worst = health.Aggregate(worst, health.Status(c.Resources[i].fine))
		}
		c.Ready = boolPtr(unknownWhy == "" && worst == health.Ready)
	}
	return c
}

// syncOf decides a resource's sync state from what rsync applied and what
// the bundle reports (syncstate.Decide), with its heal record.
func syncOf(res *Resource, rs appcontext.ResourceStatus, bundle *v1alpha1.ResourceBundleStateStatus, e *appcontext.BundleEntry,
	found bool, unknownWhy, group, kind string) {
	in := syncstate.Input{RsyncStatus: rs.Status, RsyncReason: rs.Error, AppliedHash: rs.Fields, Believable: unknownWhy == "", Why: unknownWhy,
		Unwatched: unwatched(bundle, group, kind), Reports: bundle != nil && bundle.FieldsHashed, Found: found}
	if found {
		in.LiveHash = e.Hash
	}
	res.SyncStatus, res.SyncReason = syncstate.Decide(in)
	res.AdoptedFrom = rs.Adopted
	if h := rs.Heal; h != nil {
		res.Heal = &Heal{Count: h.Count, Last: h.Last.UTC().Format(time.RFC3339), By: h.By, Was: h.Was, Streak: h.Streak}
		if h.Streak >= FlappingStreak && syncstate.Drifted(rs.Status, res.SyncStatus) {
			res.SyncReason = fmt.Sprintf("%s; re-applied %d times in a row, changed again each time: something on the cluster keeps undoing it "+
				"(an HPA, an operator?), so self-heal backs off", res.SyncReason, h.Streak)
		}
	}
}

// FlappingStreak is how many heals in a row, each undone soon after, make
// a resource's reason say that something keeps undoing it.
const FlappingStreak = 3

// clusterUnknown fills the cluster's connectivity and monitor and says why
// its resources are Unknown, or "" when the cluster can be believed.
func clusterUnknown(in Input, p *appcontext.Placement, bundle *v1alpha1.ResourceBundleStateStatus, c *Cluster) string {
	switch in.Context.Status.Status {
	case appcontext.Terminated, appcontext.Terminating:
		return "the context is " + strings.ToLower(in.Context.Status.Status)
	}
	st, known := in.Clusters[p.Cluster]
	if !known {
		c.Connectivity, c.Monitor = Unknown, Unknown
		// No watcher has stored its state yet, or the one that did died
		// (its state went with its lease) and the next has not read the
		// cluster's bundles yet.
		return "no watcher reports on the cluster (yet, or since its replica stopped)"
	}
	c.Connectivity, c.Monitor = st.Connectivity, st.Monitor
	if !st.LastSeen.IsZero() && in.formatTimes {
		c.LastSeen = st.LastSeen.UTC().Format(time.RFC3339)
	}
	if st.Monitor == appcontext.MonitorRunning && !st.Agent && in.SilentAfter > 0 && in.Now.Sub(st.LastSeen) > in.SilentAfter {
		c.Monitor = appcontext.MonitorSilent
	}
	switch {
	case st.Connectivity != appcontext.Available && st.UnusableReason != "":
		return "cluster unusable: " + st.UnusableReason
	case st.Connectivity != appcontext.Available:
		return "cluster unreachable since " + st.UnreachableSince.UTC().Format(time.RFC3339)
	case c.Monitor == appcontext.MonitorSilent:
		return "monitor silent since " + st.LastSeen.UTC().Format(time.RFC3339)
	case c.Monitor != appcontext.MonitorRunning:
		why := "monitor not installed"
		if st.Reason != "" {
			why += ": " + st.Reason
		}
		return why
	case bundle == nil && p.Bundle != nil && p.Bundle.Refused != "":
		return p.Bundle.Refused
	case bundle == nil:
		return "no ResourceBundleState received yet"
	}
	return ""
}

// bundleOf returns a placement's bundle status and entry index, from the
// snapshot's pre-parsed copy when the cache made one.
func bundleOf(p *appcontext.Placement) (*v1alpha1.ResourceBundleStateStatus, appcontext.BundleIndex) {
	if p.Bundle == nil || p.Bundle.Deleted {
		return nil, nil
	}
	if p.Bundle.Parsed != nil && p.Bundle.Index != nil {
		return p.Bundle.Parsed, p.Bundle.Index
	}
	var st v1alpha1.ResourceBundleStateStatus
	if len(p.Bundle.Status) == 0 || json.Unmarshal(p.Bundle.Status, &st) != nil {
		return nil, nil
	}
	return &st, appcontext.IndexBundle(&st)
}

// lookup finds a resource's bundle entry. A cluster-scoped object is
// listed without a namespace whatever its manifest said (charts often set
// one on every object, and a custom kind's scope is only known to the
// cluster), so an entry without one is the object too: no kind has both
// scopes.
func lookup(index appcontext.BundleIndex, group, kind, namespace, name string) (*appcontext.BundleEntry, bool) {
	if e := index.Get(appcontext.EntryRef{Group: group, Kind: kind, Namespace: namespace, Name: name}); e != nil {
		return e, true
	}
	if namespace == "" {
		return nil, false
	}
	e := index.Get(appcontext.EntryRef{Group: group, Kind: kind, Name: name})
	return e, e != nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// podEntries lists the bundle's pods, by namespace and name (the
// index's order).
func podEntries(index appcontext.BundleIndex) []*appcontext.BundleEntry {
	var out []*appcontext.BundleEntry
	for i := range index {
		if e := &index[i]; e.Typed != nil && e.Kind == "Pod" && e.Group == "" {
			out = append(out, e)
		}
	}
	return out
}

// setDetail makes the bundle entry's object the resource's detail, or
// notes where it is when details are deferred.
func (r *Resource) setDetail(in Input, e *appcontext.BundleEntry) {
	if in.deferDetail {
		r.entry = e
		return
	}
	r.Detail = entryObject(e)
}

// entryObject is the object an entry reports.
func entryObject(e *appcontext.BundleEntry) json.RawMessage {
	if e.Custom != nil {
		return json.RawMessage(e.Custom.Object.Raw)
	}
	return objectOf(*e.Typed)
}

// objectOf rebuilds an object from a typed entry.
func objectOf(e v1alpha1.ResourceStatus) json.RawMessage {
	obj := map[string]json.RawMessage{"metadata": json.RawMessage(e.Metadata.Raw)}
	obj["apiVersion"], _ = json.Marshal(e.APIVersion)
	obj["kind"], _ = json.Marshal(e.Kind)
	if e.Spec != nil {
		obj["spec"] = json.RawMessage(e.Spec.Raw)
	}
	if e.Status != nil {
		obj["status"] = json.RawMessage(e.Status.Raw)
	}
	data, _ := json.Marshal(obj)
	return data
}

// notApplied is the reason of a resource rsync has not applied.
func notApplied(rs appcontext.ResourceStatus) string {
	why := "not applied (rsync: " + rs.Status + ")"
	if rs.Error != "" {
		why += ": " + rs.Error
	}
	return why
}

func unwatched(b *v1alpha1.ResourceBundleStateStatus, group, kind string) string {
	if b == nil {
		return ""
	}
	for _, k := range b.UnwatchedKinds {
		if k.Group == group && k.Kind == kind {
			return "the monitor cannot watch " + kind + ": " + k.Reason
		}
	}
	return ""
}

// namespaced guesses scope for display only (rsync resolved the real one);
// cluster-scoped kinds commonly rendered by charts have no namespace.
func namespaced(kind string) bool {
	switch kind {
	case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
		"StorageClass", "PriorityClass", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		return false
	}
	return true
}

func match(filter []string, v string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if f == v {
			return true
		}
	}
	return false
}

// clusterMatcher is matchCluster of filter, through a set when the filter
// is long: a history pass asks for every cluster a batch of changes
// touched (thousands while a DIG on a fleet is instantiated), and a scan
// of them per placement made that pass quadratic.
func clusterMatcher(filter []appcontext.ClusterRef) func(appcontext.ClusterRef) bool {
	if len(filter) <= 8 {
		return func(c appcontext.ClusterRef) bool { return matchCluster(filter, c) }
	}
	set := make(map[appcontext.ClusterRef]struct{}, len(filter))
	for _, f := range filter {
		set[f] = struct{}{}
	}
	return func(c appcontext.ClusterRef) bool {
		_, ok := set[c]
		return ok
	}
}

func matchCluster(filter []appcontext.ClusterRef, c appcontext.ClusterRef) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if f == c {
			return true
		}
	}
	return false
}

func matchResource(filter []string, kind, name string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if f == name || strings.EqualFold(f, kind+"/"+name) {
			return true
		}
	}
	return false
}

func boolPtr(b bool) *bool { return &b }

// Drift lists the resources of in's context that drifted — Applied, but
// OutOfSync or Missing on a cluster that can be believed — among those q's
// app, cluster and resource filters pass; and, as Unknown, those applied
// by an Argus that did not record the fields it manages (a sync records
// them; self-heal leaves them alone).
func Drift(in Input, q Query) []appcontext.Drifted {
	var out []appcontext.Drifted
	if in.Context == nil {
		return nil
	}
	inClusters := clusterMatcher(q.Clusters)
	for _, p := range in.Context.Placements {
		if !match(q.Apps, p.App) || !inClusters(p.Cluster) || left(p) {
			continue
		}
		bundle, index := bundleOf(p)
		var scratch Cluster
		why := clusterUnknown(in, p, bundle, &scratch)
		for _, r := range p.Resources {
			rs := p.StatusOf(r.Key())
			if r.Removed || r.Hook != nil || !matchResource(q.Resources, r.GVK.Kind, r.Name) {
				continue
			}
			ns := r.Namespace
			if ns == "" && namespaced(r.GVK.Kind) {
				ns = in.Context.Meta.Namespace
			}
			e, found := lookup(index, r.GVK.Group, r.GVK.Kind, ns, r.Name)
			var res Resource
			syncOf(&res, rs, bundle, e, found, why, r.GVK.Group, r.GVK.Kind)
			unrecorded := rs.Status == appcontext.RsyncApplied && rs.Fields == "" && found && why == ""
			if !syncstate.Drifted(rs.Status, res.SyncStatus) && !unrecorded {
				continue
			}
			out = append(out, appcontext.Drifted{HealTarget: appcontext.HealTarget{App: p.App, Cluster: p.Cluster, Key: r.Key(),
				GVK: r.GVK, Name: r.Name, Namespace: ns, Was: res.SyncStatus, Reason: res.SyncReason}, Heal: rs.Heal, Applied: rs.Updated})
		}
	}
	return out
}
