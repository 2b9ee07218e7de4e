package status

import (
	"context"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Snapshot is what a DIG or v1 instance is now, reduced to what a history
// of transitions records: its user actions, its context's status and
// readiness, and each resource's three views.
type Snapshot struct {
	// Instance is the current context ("" before the first instantiation).
	Instance string
	// Actions are the user actions, oldest first (DIGs only).
	Actions []catalog.StateAction
	// Status and Error are the context's; Ready is the aggregate readiness.
	Status, Error string
	Ready         bool
	Resources     []ResourceState
	// Placements is each app's readiness on each cluster the snapshot
	// covers (PlacementKey): Ready is true when there is at least one and
	// all are, so a snapshot of some clusters can be folded into what is
	// known of the others.
	Placements map[string]bool
}

// PlacementKey names an app's placement on a cluster in
// Snapshot.Placements.
func PlacementKey(app string, c appcontext.ClusterRef) string { return app + "|" + c.String() }

// ResourceState is one resource in a Snapshot.
type ResourceState struct {
	Key                                     ResourceKey
	RsyncStatus, ClusterStatus, ReadyStatus string
	Reason                                  string
	// SyncStatus is desired against live; SyncReason why not Synced.
	SyncStatus, SyncReason string
	// Heal is its heal record (nil before the first), AdoptedFrom who held
	// it before rsync adopted it.
	Heal        *Heal
	AdoptedFrom string
	// Since is when rsync last set the resource's status (queued it,
	// applied it); zero for pods, which rsync does not apply.
	Since time.Time
}

// Snapshot answers for a change-routing group ("dig:<p>/<ca>/<v>/<dig>" or
// "instance:<id>"); a group whose subject no longer exists is NotFound.
func (r *Reader) Snapshot(ctx context.Context, group string) (Snapshot, error) {
	return r.SnapshotOf(ctx, group, nil)
}

// SnapshotOf is Snapshot of the resources on some clusters only (all when
// clusters is nil): what a change on those clusters can have altered.
// Its Ready covers those clusters alone.
func (r *Reader) SnapshotOf(ctx context.Context, group string, clusters []appcontext.ClusterRef) (Snapshot, error) {
	g, _ := catalog.ParseGroup(group)
	q := Query{Type: TypeCluster, Output: OutputAll, Clusters: clusters}
	if clusters != nil && len(clusters) == 0 {
		q.Clusters = []appcontext.ClusterRef{{}} // none: matches no placement
	}
	switch g.Kind {
	case catalog.GroupInstance:
		var out Snapshot
		_, err := r.instance(ctx, g.Key[0], func(in Input) { out = snapshotOf(in, q) })
		return out, err
	case catalog.GroupDIG:
	default:
		return Snapshot{}, errdefs.Invalid("group %q is neither a deployment intent group nor an instance", group)
	}
	dig := g.Key
	header, st, err := r.digHeader(ctx, dig)
	if err != nil {
		return Snapshot{}, err
	}
	var out Snapshot
	err = r.withInput(ctx, header, st, st.ContextID, func(in Input) { out = snapshotOf(in, q) })
	return out, err
}

// snapshotOf builds a Snapshot as a type=cluster answer that also carries
// each resource's rsync status would report it.
func snapshotOf(in Input, q Query) Snapshot {
	out := Snapshot{Actions: in.State, Placements: map[string]bool{}}
	if in.Context == nil {
		return out
	}
	in.withRsync = true
	resp := Build(in, q)
	out.Instance, out.Status, out.Error = in.Context.Meta.ID, in.Context.Status.Status, in.Context.Status.Error
	out.Ready = resp.Ready != nil && *resp.Ready
	for _, a := range resp.Apps {
		for _, c := range a.Clusters {
			out.Placements[PlacementKey(a.Name, appcontext.ClusterRef{Provider: c.ClusterProvider, Name: c.Cluster})] = c.Ready != nil && *c.Ready
			for _, res := range c.Resources {
				out.Resources = append(out.Resources, ResourceState{
					Key: ResourceKey{App: a.Name, ClusterProvider: c.ClusterProvider, Cluster: c.Cluster,
						Group: res.GVK.Group, Version: res.GVK.Version, Kind: res.GVK.Kind, Namespace: res.Namespace, Name: res.Name},
					RsyncStatus: res.RsyncStatus, ClusterStatus: res.ClusterStatus, ReadyStatus: res.ReadyStatus, Reason: res.Reason,
					SyncStatus: res.SyncStatus, SyncReason: res.SyncReason, Heal: res.Heal, AdoptedFrom: res.AdoptedFrom, Since: res.since})
			}
		}
	}
	return out
}
