package orchestrator

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// BenchmarkStartToReady measures a cold start with embedded stores (fresh data
// dir) until /readyz answers 200, then a clean stop. Target: under 3 s.
func BenchmarkStartToReady(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		dir := b.TempDir()
		begin := time.Now()
		app, err := New(Options{DataDir: dir, Listen: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- app.Run(ctx) }()
		select {
		case <-app.Ready():
		case err := <-done:
			b.Fatal(err)
		}
		resp, err := http.Get("http://" + app.Addr().String() + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("readyz: %v %v", resp, err)
		}
		resp.Body.Close()
		total += time.Since(begin)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
}

// BenchmarkRefusedLargeDescriptions PUTs a project with a description of
// about a MiB b.N times (-benchtime 2500x for issue 23's run): every one is
// refused by the object limit, and etcd does not grow.
func BenchmarkRefusedLargeDescriptions(b *testing.B) {
	r := onSharedStores(b, nil)
	if code, body := r.call(b, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		b.Fatalf("create: %d %s", code, body)
	}
	big := describe("p1", 1<<20-200)
	before := dbSize(b)
	refused := 0
	for b.Loop() {
		if code, _ := r.call(b, "PUT", "/v2/projects/p1", big); code == 413 {
			refused++
		}
	}
	b.ReportMetric(float64(refused), "refused")
	b.ReportMetric(float64(dbSize(b)-before), "etcd-growth-bytes")
}
