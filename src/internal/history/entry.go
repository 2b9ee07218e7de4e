package history

import (
	"sort"
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
	Head      bool                `json:"head,omitempty"`
	Instance  string              `json:"instance,omitempty"`
	Status    string              `json:"status,omitempty"`
	Ready     bool                `json:"ready,omitempty"`
	Resources map[string]resState `json:"resources,omitempty"`
}

// resState is a resource's recorded views, in short JSON names: a cursor
// holds one per resource.
type resState struct {
	Rsync   string `json:"r,omitempty"`
	Cluster string `json:"c,omitempty"`
	Ready   string `json:"y,omitempty"`
}

func (s resState) state() *State {
	ready := s.Ready == "Ready"
	return &State{RsyncStatus: s.Rsync, ClusterStatus: s.Cluster, ReadyStatus: s.Ready, Ready: &ready}
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
		if c.Resources == nil {
			c.Resources = map[string]resState{}
		}
		if e.To == nil {
			delete(c.Resources, e.key())
		} else {
			c.Resources[e.key()] = resState{Rsync: e.To.RsyncStatus, Cluster: e.To.ClusterStatus, Ready: e.To.ReadyStatus}
		}
	}
}

func (c cursor) clone() cursor {
	out := c
	out.Resources = make(map[string]resState, len(c.Resources))
	for k, v := range c.Resources {
		out.Resources[k] = v
	}
	return out
}

// diff lists the transitions from the recorded state to snap, unnumbered:
// new user actions (at their own times), then a status change, then the
// resources in key order, all but the actions at now. It is pure.
func diff(c cursor, snap status.Snapshot, now time.Time) []Entry {
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
		now := resState{Rsync: r.RsyncStatus, Cluster: r.ClusterStatus, Ready: r.ReadyStatus}
		prev, known := c.Resources[k]
		if known && prev == now {
			continue
		}
		e := resourceEntry(r.Key, snap.Instance, r.Reason)
		if known {
			e.From = prev.state()
		}
		e.To = now.state()
		changed = append(changed, e)
	}
	for k, prev := range c.Resources {
		if seen[k] {
			continue
		}
		if key, ok := status.ParseResourceKey(k); ok {
			e := resourceEntry(key, snap.Instance, "no longer reported")
			e.From = prev.state()
			changed = append(changed, e)
		}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].key() < changed[j].key() })
	for i := range changed {
		changed[i].Time = now
	}
	return append(out, changed...)
}

func resourceEntry(k status.ResourceKey, instance, reason string) Entry {
	return Entry{Kind: KindResource, Instance: instance, App: k.App, ClusterProvider: k.ClusterProvider, Cluster: k.Cluster,
		Resource: &Resource{GVK: status.GVK{Group: k.Group, Version: k.Version, Kind: k.Kind}, Name: k.Name, Namespace: k.Namespace},
		Reason:   reason}
}
