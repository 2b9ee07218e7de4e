package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// seedLargeDIG writes, through the real appcontext write path, a DIG of
// apps × clusters × perApp resources, every one Applied and reported Ready
// by its cluster's bundle, with every cluster Available and its monitor
// Running. It returns the context id.
func seedLargeDIG(b *testing.B, o *orch, apps, clusters, perApp int) string {
	b.Helper()
	ctx := context.Background()
	cat := o.catalog
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(catalog.For[catalog.Empty](cat, catalog.Projects).Create(ctx, catalog.Key{"p1"}, catalog.Object[catalog.Empty]{Metadata: catalog.Metadata{Name: "p1"}}))
	must(catalog.For[catalog.CompositeAppSpec](cat, catalog.CompositeApps).Create(ctx, catalog.Key{"p1", "ca", "v1"},
		catalog.Object[catalog.CompositeAppSpec]{Metadata: catalog.Metadata{Name: "ca"}, Spec: catalog.CompositeAppSpec{Version: "v1"}}))
	dig := catalog.Key{"p1", "ca", "v1", "dig1"}
	must(catalog.For[catalog.DIGSpec](cat, catalog.DeploymentIntentGroups).Create(ctx, dig,
		catalog.Object[catalog.DIGSpec]{Metadata: catalog.Metadata{Name: "dig1"}, Spec: catalog.DIGSpec{CompositeProfile: "cpf"}}))

	id := appcontext.NewID()
	var placements []*appcontext.Placement
	bundles := map[string]json.RawMessage{}
	for a := range apps {
		app := fmt.Sprintf("app%02d", a)
		var rs []appcontext.Resource
		var entries []map[string]any
		for r := range perApp {
			name := fmt.Sprintf("%s-cm-%d", app, r)
			rs = append(rs, appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Namespace: "default",
				Manifest: json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"k":"v"}}`)})
			entries = append(entries, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "readyStatus": "Ready",
				"metadata": map[string]any{"name": name, "namespace": "default", "labels": map[string]any{"emco/deployment-id": id + "-" + app}}})
		}
		st, _ := json.Marshal(map[string]any{"ready": true, "resourceCount": perApp, "reason": "", "trimmed": false,
			"observedGeneration": 1, "unwatchedKinds": []any{}, "configMapStatuses": entries})
		bundles[app] = st
		for c := range clusters {
			placements = append(placements, &appcontext.Placement{App: app,
				Cluster: appcontext.ClusterRef{Provider: "cp", Name: fmt.Sprintf("edge%02d", c)}, Resources: rs})
		}
	}
	store := o.contexts
	must(store.Create(ctx, appcontext.Meta{ID: id, Kind: "dig", Group: catalog.DIGGroup(dig), Project: "p1", CompositeApp: "ca",
		Version: "v1", DIG: "dig1", Namespace: "default", StatusID: id, Created: time.Now().UTC()},
		appcontext.Status{Status: appcontext.Instantiated}, placements))
	// Statuses and bundles as rsync and the watchers write them, 16 at a time.
	work := make(chan func() error)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				must(f())
			}
		}()
	}
	for _, p := range placements {
		for _, r := range p.Resources {
			work <- func() error {
				return store.SetResourceStatuses(ctx, id, []appcontext.StatusUpdate{{App: p.App, Cluster: p.Cluster, Key: r.Key(),
					Status: appcontext.ResourceStatus{Status: appcontext.RsyncApplied}}}, nil)
			}
		}
		work <- func() error {
			return store.PutBundle(ctx, id, p.App, p.Cluster, appcontext.BundleSnapshot{ResourceVersion: "1", Status: bundles[p.App], Received: time.Now().UTC()})
		}
	}
	for c := range clusters {
		ref := appcontext.ClusterRef{Provider: "cp", Name: fmt.Sprintf("edge%02d", c)}
		work <- func() error {
			return store.PutClusterState(ctx, ref, appcontext.ClusterState{Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning,
				LastSeen: time.Now().Add(time.Hour).UTC()}) // stays Running for the benchmark's length
		}
	}
	close(work)
	wg.Wait()
	_, err := cat.TransitionDIG(ctx, dig, []string{catalog.StateCreated}, catalog.StateAction{State: catalog.StateInstantiated, ContextID: id, TimeStamp: time.Now().UTC()}, id)
	must(err)
	return id
}

// BenchmarkStatus20k serves the status of a 20,000-resource DIG (50 apps ×
// 40 clusters × 10) through the real engine over HTTP, for each type and
// output, and a bare etcd range read of the same context for comparison.
// Targets at p50: summary ≤ 10 ms, all ≤ 100 ms.
func BenchmarkStatus20k(b *testing.B) {
	o := startOrchestratorTB(b, testenv.UniqueName("big"), "/"+testenv.UniqueName("big"))
	id := seedLargeDIG(b, o, 50, 40, 10)
	check := o.must(200, "GET", digPath+"/status?type=cluster&output=summary", nil)
	var sum struct {
		Ready       bool           `json:"ready"`
		ReadyStatus map[string]int `json:"ready-status"`
	}
	_ = json.Unmarshal([]byte(check), &sum)
	if !sum.Ready || sum.ReadyStatus["Ready"] != 20000 {
		b.Fatalf("seeded DIG not all ready: %s", check)
	}
	for _, q := range []string{"type=rsync&output=summary", "type=rsync&output=all", "type=cluster&output=summary", "type=cluster&output=all"} {
		b.Run(q, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				resp, err := http.Get(o.base + digPath + "/status?" + q)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				lat = append(lat, time.Since(start))
			}
			reportPercentiles(b, lat)
		})
	}
	b.Run("bare-etcd-range-read", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := stores.Etcd.Client.Get(context.Background(), o.prefix+"/ctx/"+id+"/", clientv3.WithPrefix()); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		reportPercentiles(b, lat)
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// The orchestrator runs in the test process: its heap, with the
	// 20,000-resource context cached, is this process's live heap.
	b.Logf("heap in use with the context cached: %.0f MiB", float64(ms.HeapInuse)/(1<<20))
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
