package history

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/status"
)

// Entry kinds.
const (
	// KindResource is a resource's rsync status, cluster status or
	// readiness changing (or the resource appearing or going away).
	KindResource = "resource"
	// KindStatus is the context's status or the subject's readiness
	// changing.
	KindStatus = "status"
	// KindAction is a user action on a DIG (approve, instantiate, update,
	// terminate, stop), at the time it was taken.
	KindAction = "action"
	// KindHeal is a resource re-applied because it drifted: by a sync
	// (POST …/sync) or by self-heal (By says which).
	KindHeal = "heal"
	// KindAdopt is an existing object rsync took over (the deployment
	// adopts, the object allowed it); Reason names who held it.
	KindAdopt = "adopt"
)

// Entry is one recorded transition. From is absent for something that
// appeared, To for something that went away.
type Entry struct {
	// Seq numbers a subject's entries 1, 2, 3… in the order recorded.
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Instance string    `json:"instance,omitempty"`
	App      string    `json:"app,omitempty"`
	// ClusterProvider and Cluster name the cluster of a resource entry.
	ClusterProvider string    `json:"cluster-provider,omitempty"`
	Cluster         string    `json:"cluster,omitempty"`
	Resource        *Resource `json:"resource,omitempty"`
	From            *State    `json:"from,omitempty"`
	To              *State    `json:"to,omitempty"`
	// Reason says why: a resource's reason for not being Ready, or the
	// context's error.
	Reason string `json:"reason,omitempty"`
	// Revision is the revision an action made (instantiate, update,
	// rollback, migrate).
	Revision int64 `json:"revision,omitempty"`
	// By is who healed (sync or self-heal), Heals how often the resource
	// has been healed with this one (heal entries); AdoptedFrom who held
	// an adopted object (adopt entries).
	By          string `json:"by,omitempty"`
	Heals       int    `json:"heals,omitempty"`
	AdoptedFrom string `json:"adoptedFrom,omitempty"`
}

// Resource names the resource of an entry.
type Resource struct {
	GVK       status.GVK `json:"GVK"`
	Name      string     `json:"name"`
	Namespace string     `json:"namespace,omitempty"`
}

// State is one side of a transition: a resource's three views, or the
// subject's context status and readiness, or a user action's state.
type State struct {
	RsyncStatus   string `json:"rsync-status,omitempty"`
	ClusterStatus string `json:"cluster-status,omitempty"`
	Ready         *bool  `json:"ready,omitempty"`
	ReadyStatus   string `json:"ready-status,omitempty"`
	SyncStatus    string `json:"sync-status,omitempty"`
	State         string `json:"state,omitempty"`
	Status        string `json:"status,omitempty"`
}

// key is the resource key of a resource entry.
func (e Entry) key() string {
	if e.Resource == nil {
		return ""
	}
	return status.ResourceKey{App: e.App, ClusterProvider: e.ClusterProvider, Cluster: e.Cluster,
		Group: e.Resource.GVK.Group, Version: e.Resource.GVK.Version, Kind: e.Resource.GVK.Kind,
		Namespace: e.Resource.Namespace, Name: e.Resource.Name}.String()
}

// cursor is the last recorded state of a subject: what the next snapshot
// is diffed against. It is stored with the entries it accounts for.
type cursor struct {
	Seq int64 `json:"seq"`
	// Actions is how many user actions have been recorded.
	Actions int `json:"actions"`
	// Head is set once the context's status has been recorded.
	Head     bool   `json:"head,omitempty"`
	Instance string `json:"instance,omitempty"`
	Status   string `json:"status,omitempty"`
	Ready    bool   `json:"ready,omitempty"`
	// Trimmed is the last entry deleted to keep Limit (0: none yet, or an
	// earlier version's cursor, which trims from the first).
	Trimmed int64 `json:"trimmed,omitempty"`
	// Resources is where an earlier version kept the views recorded per
	// resource, inline: read (into clusters), never written.
	Resources map[string]resState `json:"resources,omitempty"`

	// clusters are the views recorded per resource, by cluster record
	// (clusterOf) and then resource key; the store keeps them one value per
	// cluster, not in the cursor's own value. By cluster, a change of a
	// few clusters costs those clusters' resources, never the subject's.
	clusters map[string]map[string]resState
	// owned are the clusters whose map this cursor copied from the one it
	// was cloned from (copy on write).
	owned map[string]bool
	// inline: loaded from an earlier version's cursor, resources inline.
	inline bool
}

// head is the cursor's own value, without its resources.
func (c cursor) head() cursor {
	c.Resources, c.clusters, c.owned = nil, nil, nil
	return c
}

// get is a resource's recorded views.
func (c *cursor) get(cluster, key string) (resState, bool) {
	rs, ok := c.clusters[cluster][key]
	return rs, ok
}

// allClusters names every cluster with a recorded resource.
func (c *cursor) allClusters() map[string]bool {
	out := make(map[string]bool, len(c.clusters))
	for cl := range c.clusters {
		out[cl] = true
	}
	return out
}

// size is how many resources are recorded.
func (c *cursor) size() int {
	n := 0
	for _, m := range c.clusters {
		n += len(m)
	}
	return n
}

// put records a resource's views (delete: forgets it), copying its
// cluster's map first if a cursor it was cloned from shares it.
func (c *cursor) put(key string, rs resState, remove bool) {
	cl := clusterOf(key)
	if c.clusters == nil {
		c.clusters = map[string]map[string]resState{}
	}
	m := c.clusters[cl]
	if !c.owned[cl] {
		m = maps.Clone(m)
		if m == nil {
			m = map[string]resState{}
		}
		if c.owned == nil {
			c.owned = map[string]bool{}
		}
		c.owned[cl] = true
		c.clusters[cl] = m
	}
	if remove {
		delete(m, key)
		if len(m) == 0 {
			delete(c.clusters, cl)
			delete(c.owned, cl)
		}
		return
	}
	m[key] = rs
}

// resState is a resource's recorded views, in short JSON names: a cursor
// holds one per resource.
type resState struct {
	Rsync   string `json:"r,omitempty"`
	Cluster string `json:"c,omitempty"`
	Ready   string `json:"y,omitempty"`
	Sync    string `json:"s,omitempty"`
	// Heals and Adopted are what heal and adopt entries were recorded up to.
	Heals   int    `json:"h,omitempty"`
	Adopted string `json:"a,omitempty"`
}

func (s resState) state() *State {
	ready := s.Ready == "Ready"
	return &State{RsyncStatus: s.Rsync, ClusterStatus: s.Cluster, ReadyStatus: s.Ready, Ready: &ready, SyncStatus: s.Sync}
}

// views is the part of the state a resource entry records.
func (s resState) views() resState {
	return resState{Rsync: s.Rsync, Cluster: s.Cluster, Ready: s.Ready, Sync: s.Sync}
}

// apply moves the cursor past e and numbers e.
func (c *cursor) apply(e *Entry) {
	c.Seq++
	e.Seq = c.Seq
	switch e.Kind {
	case KindAction:
		c.Actions++
	case KindStatus:
		c.Head, c.Instance, c.Status = true, e.Instance, e.To.Status
		c.Ready = e.To.Ready != nil && *e.To.Ready
	case KindResource:
		k := e.key()
		if e.To == nil {
			c.put(k, resState{}, true)
		} else {
			old, _ := c.get(clusterOf(k), k)
			c.put(k, resState{Rsync: e.To.RsyncStatus, Cluster: e.To.ClusterStatus, Ready: e.To.ReadyStatus,
				Sync: e.To.SyncStatus, Heals: old.Heals, Adopted: old.Adopted}, false)
		}
	case KindHeal, KindAdopt:
		k := e.key()
		rs, _ := c.get(clusterOf(k), k)
		if e.Kind == KindHeal {
			rs.Heals = e.Heals
		} else {
			rs.Adopted = e.AdoptedFrom
		}
		c.put(k, rs, false)
	}
}

// clone is a cursor that may change without changing c: the clusters'
// maps are shared until either writes one (put copies a map it does not
// own, and neither owns any after this).
func (c *cursor) clone() cursor {
	out := *c
	out.clusters, out.owned, c.owned = maps.Clone(c.clusters), nil, nil
	return out
}

// keyCluster is clusterOf(k.String()) without making the string.
func keyCluster(k status.ResourceKey) string {
	if k.ClusterProvider == "" || k.Cluster == "" || strings.Contains(k.App+k.ClusterProvider+k.Cluster, "|") {
		return clusterOf(k.String())
	}
	return k.ClusterProvider + "+" + k.Cluster
}

// diff lists the transitions from the recorded state to snap, unnumbered:
// new user actions (at their own times), then a status change, then the
// resources in key order, all but the actions at now. It is pure.
func diff(c cursor, snap status.Snapshot, now time.Time) []Entry { return diffIn(c, snap, now, nil) }

// diffIn is diff of a snapshot of some clusters (in; all when nil): the
// recorded resources of other clusters are not gone, just not looked at.
func diffIn(c cursor, snap status.Snapshot, now time.Time, in map[string]bool) []Entry {
	var out []Entry
	if c.Actions > len(snap.Actions) {
		c.Actions = len(snap.Actions) // never shrinks; a recreated subject starts over
	}
	for i := c.Actions; i < len(snap.Actions); i++ {
		a := snap.Actions[i]
		from := "Created"
		if i > 0 {
			from = snap.Actions[i-1].State
		}
		out = append(out, Entry{Time: a.TimeStamp.UTC(), Kind: KindAction, Instance: a.ContextID,
			From: &State{State: from}, To: &State{State: a.State}, Revision: max(a.Revision, 0)})
	}
	if snap.Instance != "" && (!c.Head || c.Instance != snap.Instance || c.Status != snap.Status || c.Ready != snap.Ready) {
		ready := snap.Ready
		e := Entry{Time: now, Kind: KindStatus, Instance: snap.Instance, To: &State{Status: snap.Status, Ready: &ready}, Reason: snap.Error}
		if c.Head {
			was := c.Ready
			e.From = &State{Status: c.Status, Ready: &was}
		}
		out = append(out, e)
	}
	seen := make(map[string]bool, len(snap.Resources))
	var changed []Entry
	for _, r := range snap.Resources {
		k := r.Key.String()
		seen[k] = true
		now := resState{Rsync: r.RsyncStatus, Cluster: r.ClusterStatus, Ready: r.ReadyStatus, Sync: r.SyncStatus}
		prev, known := c.get(keyCluster(r.Key), k)
		if !known || prev.views() != now {
			e := resourceEntry(r.Key, snap.Instance, r.Reason)
			if known {
				e.From = prev.state()
			}
			e.To = now.state()
			changed = append(changed, e)
		}
		changed = append(changed, events(r, snap.Instance, prev)...)
	}
	look := in // the clusters whose gone resources to look for
	if look == nil {
		look = c.allClusters()
	}
	for cl := range look {
		for k, prev := range c.clusters[cl] {
			if seen[k] {
				continue
			}
			if key, ok := status.ParseResourceKey(k); ok {
				e := resourceEntry(key, snap.Instance, "no longer reported")
				e.From = prev.state()
				changed = append(changed, e)
			}
		}
	}
	sort.SliceStable(changed, func(i, j int) bool { return changed[i].key() < changed[j].key() })
	for i := range changed {
		changed[i].Time = now
	}
	return append(out, changed...)
}

// events are a resource's heal and adoption entries not recorded yet.
func events(r status.ResourceState, instance string, prev resState) []Entry {
	var out []Entry
	if r.AdoptedFrom != "" && r.AdoptedFrom != prev.Adopted {
		e := resourceEntry(r.Key, instance, "adopted an existing object held by "+r.AdoptedFrom)
		e.Kind, e.AdoptedFrom = KindAdopt, r.AdoptedFrom
		out = append(out, e)
	}
	if h := r.Heal; h != nil && h.Count > prev.Heals {
		why := "re-applied by " + h.By + ": it was " + h.Was
		if h.Streak >= status.FlappingStreak {
			why += fmt.Sprintf("; healed %d times in a row, each undone soon after: something on the cluster keeps "+
				"undoing it (an HPA, an operator?)", h.Streak)
		}
		e := resourceEntry(r.Key, instance, why)
		e.Kind, e.By, e.Heals = KindHeal, h.By, h.Count
		out = append(out, e)
	}
	return out
}

func resourceEntry(k status.ResourceKey, instance, reason string) Entry {
	return Entry{Kind: KindResource, Instance: instance, App: k.App, ClusterProvider: k.ClusterProvider, Cluster: k.Cluster,
		Resource: &Resource{GVK: status.GVK{Group: k.Group, Version: k.Version, Kind: k.Kind}, Name: k.Name, Namespace: k.Namespace},
		Reason:   reason}
}
