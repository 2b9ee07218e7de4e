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
