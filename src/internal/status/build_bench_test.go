package status

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
)

// fleetInput is a DIG of one app (5 ConfigMaps, all Ready) on n pull
// clusters, as the fleet benchmark places it.
func fleetInput(n int) Input {
	in := Input{Header: Header{Project: "p", CompositeApp: "ca", Version: "v1", Name: "dig"},
		State: []catalog.StateAction{{State: "Instantiated", ContextID: "1", TimeStamp: now}}, StatusID: "1",
		Context:  &appcontext.Context{Meta: appcontext.Meta{ID: "1", Namespace: "default"}, Status: appcontext.Status{Status: appcontext.Instantiated}},
		Clusters: map[appcontext.ClusterRef]appcontext.ClusterState{}, Now: now, SilentAfter: 30 * time.Second}
	var rs []appcontext.Resource
	for i := range 5 {
		rs = append(rs, res("", "v1", "ConfigMap", fmt.Sprintf("cm%d", i)))
	}
	st := map[string]appcontext.ResourceStatus{}
	var cms []string
	for _, r := range rs {
		st[r.Key()] = appcontext.ResourceStatus{Status: appcontext.RsyncApplied, Fields: "h-" + r.Name}
		cms = append(cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+r.Name+`","namespace":"default"},"readyStatus":"Ready","managedFieldsHash":"h-`+r.Name+`"}`)
	}
	raw := `{"ready":true,"resourceCount":5,"configMapStatuses":[` + cms[0] + `,` + cms[1] + `,` + cms[2] + `,` + cms[3] + `,` + cms[4] + `]}`
	for i := range n {
		ref := appcontext.ClusterRef{Provider: "fleet", Name: fmt.Sprintf("c%05d", i)}
		var parsed v1alpha1.ResourceBundleStateStatus
		if err := json.Unmarshal([]byte(raw), &parsed); err != nil {
			panic(err)
		}
		p := &appcontext.Placement{App: "app", Cluster: ref, Resources: rs, Statuses: st,
			Bundle: &appcontext.BundleSnapshot{ResourceVersion: "1", Status: json.RawMessage(raw), Parsed: &parsed, Index: appcontext.IndexBundle(&parsed)}}
		in.Context.Placements = append(in.Context.Placements, p)
		in.Clusters[ref] = appcontext.ClusterState{Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning, LastSeen: now, Agent: true}
	}
	return in
}

// BenchmarkBuildFleet: the type=cluster answer of a DIG on 10,000
// clusters (50,000 resources), as output=summary (issue 26: p50 ≤ 20 ms)
// and output=all (≤ 500 ms, with its JSON encoding), without the API.
func BenchmarkBuildFleet(b *testing.B) {
	in := fleetInput(10000)
	for _, out := range []string{OutputSummary, OutputAll} {
		b.Run(out, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := Build(in, Query{Type: TypeCluster, Output: out})
				if out == OutputAll {
					if _, err := json.Marshal(r); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSummaryFleet: the same summary from the cache's memo (what
// the API answers), with a handful of clusters changed between answers
// as under churn.
func BenchmarkSummaryFleet(b *testing.B) {
	in := fleetInput(10000)
	q := Query{Type: TypeCluster, Output: OutputSummary}
	var m memo[summaryState]
	in.summaries = m.state("1", q, newSummaryState(q.Type))
	Build(in, q)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i = changeSome(in, i)
		Build(in, q)
	}
}

// changeSome marks 10 placements changed, spread over the DIG from i on,
// as churn does between two answers; it returns where the next starts.
func changeSome(in Input, i int) int {
	for range 10 {
		in.Context.Placements[i%len(in.Context.Placements)].Rev++
		i += 997
	}
	return i
}

// BenchmarkEntriesFleet: a notification's entries of that DIG from the
// memo, with a handful of placements changed between notifications as
// under churn (the rest answered from the memo without a lookup each).
func BenchmarkEntriesFleet(b *testing.B) {
	in := fleetInput(10000)
	in.clusterGen = 1
	q := Query{Type: TypeCluster, Output: OutputSummary}
	s := newEntriesState()
	s.entries(in, q)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i = changeSome(in, i)
		if runs := s.entries(in, q); len(runs) != 10000 {
			b.Fatalf("%d runs", len(runs))
		}
	}
}
