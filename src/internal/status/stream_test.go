package status

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// manifestsByName serves manifests the way the orchestrator's cache of
// them does, by reference (here the resource's key), and counts the loads.
type manifestsByName struct {
	byName map[string][]byte
	loads  int
}

func (m *manifestsByName) Get(_ context.Context, _ string, r appcontext.Resource) ([]byte, error) {
	m.loads++
	return m.byName[r.ManifestRef.SHA256], nil
}

// A streamed answer is byte for byte what json.Marshal makes of the whole
// answer, for every type and output, with the details deferred (bundle
// objects built, manifests loaded by reference, as it is written) or not,
// and for a cluster answer that also carries its one cluster.
func TestWriteJSONIsTheAnswerMarshalled(t *testing.T) {
	for _, typ := range []string{TypeRsync, TypeCluster} {
		for _, out := range []string{OutputSummary, OutputAll, OutputDetail} {
			whole := Build(fixture(), Query{Type: typ, Output: out})
			want, err := json.Marshal(whole)
			if err != nil {
				t.Fatal(err)
			}
			// As the cache has it: references, not manifests.
			in := fixture()
			byName := &manifestsByName{byName: map[string][]byte{}}
			for _, p := range in.Context.Placements {
				for i := range p.Resources {
					r := &p.Resources[i]
					if r.Manifest != nil { // placements may share their resources
						byName.byName[r.Key()] = r.Manifest
					}
					r.Manifest, r.ManifestRef = nil, &appcontext.BlobRef{SHA256: r.Key()}
				}
			}
			in.deferDetail = true
			deferred := Build(in, Query{Type: typ, Output: out})
			deferred.contextID, deferred.manifests = in.Context.Meta.ID, byName
			var buf bytes.Buffer
			if err := deferred.WriteJSON(context.Background(), &buf); err != nil {
				t.Fatal(err)
			}
			if buf.String() != string(want) {
				t.Fatalf("%s/%s streamed:\n%s\nwant:\n%s", typ, out, buf.String(), want)
			}
			if typ == TypeRsync && out == OutputDetail && byName.loads == 0 {
				t.Fatal("no manifest was loaded for type=rsync output=detail")
			}
			if err := deferred.Resolve(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(deferred); string(got) != string(want) {
				t.Fatalf("%s/%s resolved:\n%s\nwant:\n%s", typ, out, got, want)
			}
		}
	}
	one := Build(fixture(), Query{Type: TypeCluster, Output: OutputDetail})
	c := one.Apps[0].Clusters[0]
	one.Cluster = &c
	want, _ := json.Marshal(one)
	var buf bytes.Buffer
	if err := one.WriteJSON(context.Background(), &buf); err != nil || buf.String() != string(want) {
		t.Fatalf("with its cluster: %v\n%s\nwant:\n%s", err, buf.String(), want)
	}
}

// An overview summary, computed placement by placement, counts what the
// type=cluster answer of the same context shows.
func TestSummaryCountsWhatTheAnswerShows(t *testing.T) {
	in := fixture()
	resp := Build(in, Query{Type: TypeCluster, Output: OutputAll})
	s := Summary{ReadyCounts: map[string]int{}, Apps: []AppSummary{}, NotReady: []NotReady{}, SyncCounts: map[string]int{}}
	summaryOf(in, &s)
	var statuses []health.Status
	total, drifted := 0, 0
	withRsync := in
	withRsync.withRsync = true
	for _, a := range Build(withRsync, Query{Type: TypeCluster, Output: OutputAll}).Apps {
		for _, c := range a.Clusters {
			for _, r := range c.Resources {
				statuses = append(statuses, health.Status(r.ReadyStatus))
				total++
				if syncstate.Drifted(r.RsyncStatus, r.SyncStatus) {
					drifted++
				}
			}
		}
	}
	summarised := 0
	for _, a := range s.Apps {
		for _, c := range a.Clusters {
			summarised += c.Drifted
		}
	}
	if drifted == 0 {
		t.Fatal("the fixture drifts nowhere: the drift count is not checked")
	}
	if summarised != drifted {
		t.Errorf("drifted: %d summarised, %d in the answer", summarised, drifted)
	}
	if s.Total != total || s.ReadyStatus != string(health.Aggregate(statuses...)) || s.Ready != *resp.Ready || len(s.Apps) != len(resp.Apps) {
		t.Fatalf("summary %+v; answer: %d resources, aggregate %s, ready %v, %d apps", s, total, health.Aggregate(statuses...), *resp.Ready, len(resp.Apps))
	}
	for k, n := range resp.ReadyStatus {
		if s.ReadyCounts[k] != n {
			t.Errorf("ready count %s: %d, want %d", k, s.ReadyCounts[k], n)
		}
	}
	for k, n := range resp.SyncCounts {
		if s.SyncCounts[k] != n {
			t.Errorf("sync count %s: %d, want %d", k, s.SyncCounts[k], n)
		}
	}
	for i, a := range resp.Apps {
		if s.Apps[i].Name != a.Name || s.Apps[i].Ready != *a.Ready || len(s.Apps[i].Clusters) != len(a.Clusters) {
			t.Errorf("app %d: %+v, want %s ready %v", i, s.Apps[i], a.Name, *a.Ready)
		}
	}
	if s.NotReadyCount != total-s.ReadyCount || len(s.NotReady) != min(s.NotReadyCount, MaxNotReady) {
		t.Errorf("not ready: %d listed of %d", len(s.NotReady), s.NotReadyCount)
	}
}
