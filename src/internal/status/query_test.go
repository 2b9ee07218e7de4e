package status

import (
	"fmt"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// clusterMatcher answers as matchCluster does, by scan or by set: no
// filter matches every cluster, the "none" filter of SnapshotOf matches
// none, a long filter exactly its clusters.
func TestClusterMatcher(t *testing.T) {
	ref := func(i int) appcontext.ClusterRef {
		return appcontext.ClusterRef{Provider: "p", Name: fmt.Sprintf("c%d", i)}
	}
	var long []appcontext.ClusterRef
	for i := 0; i < 100; i += 2 {
		long = append(long, ref(i))
	}
	for name, filter := range map[string][]appcontext.ClusterRef{
		"none given": nil, "none": {{}}, "short": {ref(1), ref(2)}, "long": long,
	} {
		m := clusterMatcher(filter)
		for i := range 101 {
			if got, want := m(ref(i)), matchCluster(filter, ref(i)); got != want {
				t.Errorf("%s: %v: %v, want %v", name, ref(i), got, want)
			}
		}
		if got := m(appcontext.ClusterRef{Provider: "q", Name: "c2"}); got != (filter == nil) {
			t.Errorf("%s: another provider's cluster: %v", name, got)
		}
	}
}
