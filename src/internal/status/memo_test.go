package status

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// TestMemoMatchesBuild changes a DIG step by step as the cache would (a
// placement's Rev bumped with each change) and checks that every summary
// and every entry list from the memos is byte for byte the one built
// afresh, for each type and filter.
//
// With the cache's cluster generation (as appcontext.Cache keeps it) the
// memos skip looking up the clusters whose state did not change, and
// must still answer the same.
func TestMemoMatchesBuild(t *testing.T) {
	for _, withGen := range []bool{false, true} {
		t.Run(fmt.Sprintf("generation=%t", withGen), func(t *testing.T) { testMemoMatchesBuild(t, withGen) })
	}
}

func testMemoMatchesBuild(t *testing.T, withGen bool) {
	in := fleetInput(60)
	for _, p := range in.Context.Placements { // each its own, to change one
		p.Statuses = maps.Clone(p.Statuses)
		p.Resources = append([]appcontext.Resource(nil), p.Resources...)
	}
	for i, p := range in.Context.Placements[:20] {
		if i%2 == 0 {
			p.App = "other"
		}
		st := in.Clusters[p.Cluster]
		st.Agent = false // judged silent by LastSeen's age
		in.Clusters[p.Cluster] = st
	}
	queries := []Query{
		{Type: TypeCluster, Output: OutputSummary},
		{Type: TypeRsync, Output: OutputSummary},
		{Type: TypeCluster, Output: OutputSummary, Apps: []string{"app"}},
		{Type: TypeCluster, Output: OutputSummary, Clusters: []appcontext.ClusterRef{in.Context.Placements[3].Cluster, in.Context.Placements[40].Cluster}},
		{Type: TypeCluster, Output: OutputSummary, Resources: []string{"cm1"}},
		{Type: TypeRsync, Output: OutputSummary, Sync: []string{"Synced"}},
		{Type: TypeCluster, Output: OutputSummary, Sync: []string{"OutOfSync", "Unknown"}},
	}
	var summaries memo[summaryState]
	var feeds memo[entriesState]
	rng := rand.New(rand.NewPCG(1, 2))
	seen := maps.Clone(in.Clusters)
	check := func(step string) {
		t.Helper()
		if withGen { // as the cache counts them
			changed := len(seen) != len(in.Clusters)
			for ref, st := range in.Clusters {
				old, ok := seen[ref]
				changed = changed || !ok || appcontext.ClusterKeyChanged(old, st)
			}
			if changed || in.clusterGen == 0 {
				in.clusterGen++
			}
			seen = maps.Clone(in.Clusters)
		}
		for _, q := range queries {
			fresh, _ := json.Marshal(Build(in, q))
			m := in
			m.summaries = summaries.state("1", q, newSummaryState(q.Type))
			got, _ := json.Marshal(Build(m, q))
			if string(got) != string(fresh) {
				t.Fatalf("after %s, query %+v:\nmemo  %s\nfresh %s", step, q, got, fresh)
			}
			if want, got := Entries(in, q), flat(feeds.state("1", q, newEntriesState).entries(in, q)); !reflect.DeepEqual(got, want) {
				t.Fatalf("after %s, entries for %+v:\nmemo  %v\nfresh %v", step, q, got, want)
			}
		}
	}
	check("nothing")
	changes := memoChanges(&in, rng)
	for i := range 150 {
		what := changes[rng.IntN(len(changes))]()
		check(fmt.Sprintf("change %d (%s)", i, what))
	}
}

// memoChanges are the changes TestMemoMatchesBuild makes, each as the
// cache would make it, saying what it changed.
func memoChanges(in *Input, rng *rand.Rand) []func() string {
	return []func() string{
		func() string {
			p := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			k := p.Resources[rng.IntN(len(p.Resources))].Key()
			p.Statuses[k] = appcontext.ResourceStatus{Status: []string{appcontext.RsyncFailed, appcontext.RsyncApplied, appcontext.RsyncPending}[rng.IntN(3)], Error: "x"}
			p.Rev++
			return "a resource's rsync status"
		},
		func() string {
			p := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			if p.Bundle == nil {
				p.Bundle = in.Context.Placements[len(in.Context.Placements)-1].Bundle
			} else {
				p.Bundle = nil
			}
			p.Rev++
			return "a bundle"
		},
		func() string {
			p := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			st := in.Clusters[p.Cluster]
			if st.Connectivity == appcontext.Available {
				st.Connectivity, st.UnreachableSince = appcontext.Unreachable, in.Now
			} else {
				st.Connectivity, st.UnreachableSince = appcontext.Available, time.Time{}
			}
			in.Clusters[p.Cluster] = st
			return "a cluster's connectivity"
		},
		func() string {
			p := in.Context.Placements[rng.IntN(20)]
			st := in.Clusters[p.Cluster]
			st.LastSeen = in.Now // renewed: silent no more
			in.Clusters[p.Cluster] = st
			return "a lease renewed"
		},
		func() string {
			p := in.Context.Placements[20+rng.IntN(len(in.Context.Placements)-20)]
			st := in.Clusters[p.Cluster]
			st.LastSeen, st.Updated = in.Now, in.Now // an agent's cluster renewed: no answer shows it
			in.Clusters[p.Cluster] = st
			return "an agent's last-seen renewed"
		},
		func() string { in.Now = in.Now.Add(20 * time.Second); return "time passing" },
		func() string {
			p := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			st := in.Clusters[p.Cluster]
			st.Monitor, st.LastSeen = appcontext.MonitorSilent, in.Now.Add(-time.Duration(rng.IntN(100))*time.Second)
			in.Clusters[p.Cluster] = st
			return "a monitor recorded silent"
		},
		func() string {
			p := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			delete(in.Clusters, p.Cluster)
			return "a cluster's state gone"
		},
		func() string {
			i := rng.IntN(len(in.Context.Placements))
			in.Context.Placements = append(in.Context.Placements[:i:i], in.Context.Placements[i+1:]...)
			return "a placement gone"
		},
		func() string {
			src := in.Context.Placements[rng.IntN(len(in.Context.Placements))]
			p := &appcontext.Placement{App: src.App, Cluster: appcontext.ClusterRef{Provider: "fleet", Name: fmt.Sprintf("n%d", rng.IntN(1000))},
				Resources: src.Resources, Statuses: maps.Clone(src.Statuses), Bundle: src.Bundle}
			in.Context.Placements = append(in.Context.Placements, p)
			in.Clusters[p.Cluster] = appcontext.ClusterState{Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning, LastSeen: in.Now}
			return "a placement added"
		},
		func() string {
			st := in.Context.Status
			st.Status = []string{appcontext.Instantiated, appcontext.Terminated}[rng.IntN(2)]
			in.Context.Status = st
			return "the context's status"
		},
	}
}

// TestEntriesOnePerKey: two resources of a chart that end up under one key
// make one entry (the notifier diffs by key: a second would hide a
// deletion from its one-pass diff).
func TestEntriesOnePerKey(t *testing.T) {
	c := Cluster{ClusterProvider: "cp", Cluster: "c1", Resources: []Resource{
		{GVK: GVK{"rbac.authorization.k8s.io", "v1", "ClusterRole"}, Name: "x", ReadyStatus: "Ready"},
		{GVK: GVK{"rbac.authorization.k8s.io", "v1", "ClusterRole"}, Name: "x", ReadyStatus: "Ready"},
		{GVK: GVK{"", "v1", "ConfigMap"}, Name: "x", Namespace: "ns", ReadyStatus: "Ready"},
	}}
	if got := appendEntries(nil, "app", c); len(got) != 2 {
		t.Fatalf("%d entries, want 2: %v", len(got), got)
	}
}

// TestMemoEvictsTheLeastRecentlyUsed: past maxMemos states, the one
// used longest ago goes, not one in use.
func TestMemoEvictsTheLeastRecentlyUsed(t *testing.T) {
	var m memo[entriesState]
	hot := m.state("hot", Query{}, newEntriesState)
	for i := range 3 * maxMemos {
		m.state(fmt.Sprint(i), Query{}, newEntriesState)
		if m.state("hot", Query{}, newEntriesState) != hot {
			t.Fatalf("the state in use was evicted after %d others", i+1)
		}
	}
	if len(m.byKey) != maxMemos {
		t.Fatalf("%d states kept, want %d", len(m.byKey), maxMemos)
	}
}

// flat is runs' entries in one slice, nil for none (as Entries).
func flat(runs Runs) []Entry {
	var out []Entry
	for _, run := range runs {
		out = append(out, run...)
	}
	return out
}
