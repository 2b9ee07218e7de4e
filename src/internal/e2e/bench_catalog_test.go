package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// BenchmarkFullCatalog is issue 27's store scenario: a catalogue holding
// ARGUS_BENCH_CATALOG_APPS apps (300 in the issue) of 2 MiB charts each,
// in another composite app, on the embedded FerretDB. It measures an
// unrelated DIG's update (its planning reads its own charts) and the
// start of a second replica on those stores (start-up repairs and the
// index reconcile read no content). Targets: ≤ 1 s and ≤ 5 s. Unset, it
// is skipped (filling the catalogue takes minutes):
//
//	make sim && ARGUS_BENCH_CATALOG_APPS=300 go test ./src/internal/e2e -run '^$' -bench FullCatalog -benchtime 5x -timeout 60m
func BenchmarkFullCatalog(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("ARGUS_BENCH_CATALOG_APPS"))
	if n <= 0 {
		b.Skip("set ARGUS_BENCH_CATALOG_APPS (e.g. 300) to run it")
	}
	db, prefix := testenv.UniqueName("full"), "/"+testenv.UniqueName("full")
	o := startOrchestratorTB(b, db, prefix, func(opts *orchestrator.Options) { opts.ReplicaID = "r1" })
	onboard(b, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "1"}}})
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	o.waitContext(o.digState().ContextID, "instantiated", allResources(appcontext.RsyncApplied))
	filled := fillCatalog(b, o, n)
	b.Logf("catalogue filled: %d apps of 2 MiB in %s", n, filled.Round(time.Second))

	var updates, starts time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		o.must(200, "PUT", caPath+"/deployment-intent-groups/dig1", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1",
			"overrideValues": []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": strconv.Itoa(1 + i%2)}}}}))
		o.must(202, "POST", digPath+"/update", nil)
		took := time.Since(start)
		updates += took
		b.StopTimer()
		o.waitContext(o.digState().ContextID, "updated", func(c *appcontext.Context) (bool, string) {
			return c.Status.Status == appcontext.Updated, c.Status.Status
		})
		b.StartTimer()
		started := timeStart(b, db, prefix, "r"+strconv.Itoa(i+2))
		starts += started
		b.Logf("update (PUT and POST) answered in %s; a replica started in %s", took.Round(time.Millisecond), started.Round(time.Millisecond))
	}
	b.ReportMetric(float64(updates.Milliseconds())/float64(b.N), "update-ms")
	b.ReportMetric(float64(starts.Milliseconds())/float64(b.N), "replica-start-ms")
}

// fillCatalog stores n apps of 2 MiB (incompressible charts) in another
// project's composite app, four at a time, through the test's catalogue
// (the orchestrator's index follows it).
func fillCatalog(b *testing.B, o *orch, n int) time.Duration {
	start := time.Now()
	ctx := context.Background()
	projects := catalog.For[catalog.Empty](o.catalog, catalog.Projects)
	cas := catalog.For[catalog.CompositeAppSpec](o.catalog, catalog.CompositeApps)
	apps := catalog.For[catalog.Empty](o.catalog, catalog.Apps)
	if err := projects.Create(ctx, catalog.Key{"big"}, catalog.Object[catalog.Empty]{Metadata: catalog.Metadata{Name: "big"}}); err != nil {
		b.Fatal(err)
	}
	if err := cas.Create(ctx, catalog.Key{"big", "ca", "v1"}, catalog.Object[catalog.CompositeAppSpec]{Metadata: catalog.Metadata{Name: "ca"},
		Spec: catalog.CompositeAppSpec{Version: "v1"}}); err != nil {
		b.Fatal(err)
	}
	blob := make([]byte, 2<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	chart := testenv.ArchiveFiles(b, map[string]string{
		"big/Chart.yaml":                "apiVersion: v2\nname: big\nversion: 0.1.0\n",
		"big/templates/configmap.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
		"big/files/incompressible.data": string(blob),
	})
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, n)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("app%03d", i)
				if err := apps.CreateWithContent(ctx, catalog.Key{"big", "ca", "v1", name}, catalog.Object[catalog.Empty]{Metadata: catalog.Metadata{Name: name}}, chart); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Since(start)
}

// timeStart starts a replica on the stores and measures it until ready;
// it is stopped again, untimed.
func timeStart(b *testing.B, db, prefix, id string) time.Duration {
	app, err := orchestrator.New(orchestrator.Options{Listen: "127.0.0.1:0", EtcdEndpoints: stores.EtcdEndpoints(), MongoURI: stores.MongoURI(),
		MongoDatabase: db, EtcdPrefix: prefix, ReplicaID: id})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- app.Run(ctx) }()
	select {
	case <-app.Ready():
	case err := <-done:
		b.Fatalf("replica %s stopped: %v", id, err)
	}
	took := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Error(err)
	}
	b.StartTimer()
	return took
}
