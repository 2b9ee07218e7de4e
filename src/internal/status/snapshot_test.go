package status

import (
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Snapshots of one cluster at a time add up to the whole group's: the
// same resources, the same placements, and the readiness the history
// recorder folds from them is the whole snapshot's.
func TestSnapshotsOfClustersAddUpToTheWhole(t *testing.T) {
	q := func(cs ...appcontext.ClusterRef) Query {
		return Query{Type: TypeCluster, Output: OutputAll, Clusters: cs}
	}
	whole := snapshotOf(fixture(), q())
	if len(whole.Placements) != 3 || len(whole.Resources) == 0 {
		t.Fatalf("whole snapshot: %d placements, %d resources", len(whole.Placements), len(whole.Resources))
	}
	placements, resources := map[string]bool{}, map[string]ResourceState{}
	for _, c := range []appcontext.ClusterRef{{Provider: "cp", Name: "edge01"}, {Provider: "cp", Name: "edge02"}} {
		part := snapshotOf(fixture(), q(c))
		if part.Instance != whole.Instance || part.Status != whole.Status {
			t.Fatalf("%s: head %s/%s, want %s/%s", c, part.Instance, part.Status, whole.Instance, whole.Status)
		}
		for k, ok := range part.Placements {
			placements[k] = ok
		}
		for _, r := range part.Resources {
			if r.Key.Cluster != c.Name {
				t.Fatalf("%s's snapshot holds %s", c, r.Key)
			}
			resources[r.Key.String()] = r
		}
	}
	ready := len(placements) > 0
	for k, ok := range placements {
		ready = ready && ok
		if whole.Placements[k] != ok {
			t.Errorf("placement %s ready = %v, the whole says %v", k, ok, whole.Placements[k])
		}
	}
	if len(placements) != len(whole.Placements) || ready != whole.Ready {
		t.Fatalf("folded: %d placements, ready %v; whole: %d, ready %v", len(placements), ready, len(whole.Placements), whole.Ready)
	}
	if len(resources) != len(whole.Resources) {
		t.Fatalf("%d resources by cluster, %d in the whole", len(resources), len(whole.Resources))
	}
	for _, r := range whole.Resources {
		if got := resources[r.Key.String()]; got.ReadyStatus != r.ReadyStatus || got.RsyncStatus != r.RsyncStatus || got.ClusterStatus != r.ClusterStatus {
			t.Errorf("%s: %+v by cluster, %+v in the whole", r.Key, got, r)
		}
	}
	// One placement, not ready (no bundle yet): the group is not.
	in := fixture()
	in.Context.Placements = in.Context.Placements[:1] // db on edge01, applied, no bundle: not ready
	one := snapshotOf(in, q())
	if one.Ready || len(one.Placements) != 1 {
		t.Fatalf("db alone: %+v", one.Placements)
	}
}
