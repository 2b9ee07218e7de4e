package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/netutil"

	"github.com/argus-mc/argus/src/internal/backoff"
)

// BenchmarkJoinStorm is a fleet's agents all joining at once, and nothing
// else on the machine: ARGUS_STORM_CLIENTS clients (1,000 unless set),
// each with its own transport as an agent has, POST to the API port served
// through ListenTLS with the orchestrator's default timeouts and a
// connection cap that fits them all (as --max-connections must fit a
// fleet's streams), and retry as the agent's join does until answered.
// The answer is a fixed one: no join transaction behind it. It reports the
// time until every client was answered, the clients' failed attempts and
// the server's handshake timeouts: what the TLS and HTTP/2 path alone does
// with the burst the fleet benchmark starts with (docs/benchmarks.md). Each
// iteration sets up a hub of its own (counted in ns/op).
func BenchmarkJoinStorm(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("ARGUS_STORM_CLIENTS")); err == nil && v > 0 {
		n = v
	}
	for b.Loop() {
		allDone, failed, timeouts := joinStorm(b, n)
		b.ReportMetric(allDone.Seconds(), "all_answered_s")
		b.ReportMetric(float64(failed), "failed_attempts")
		b.ReportMetric(timeouts, "server_handshake_timeouts")
	}
}

func joinStorm(b *testing.B, n int) (allDone time.Duration, failed int64, timeouts float64) {
	f := newFixture(b)
	ln, cfg, roots := tlsListener(b)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"clusterProvider":"fleet","cluster":"c","credential":"x"}`))
	}), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, TLSConfig: cfg}
	nl := f.hub.ListenTLS(srv, netutil.LimitListener(ln, n+100), ListenOptions{})
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(nl) }()
	defer func() { _ = srv.Close(); <-served }()
	url := "https://" + ln.Addr().String() + "/v2/fleet/join"
	var failures atomic.Int64
	var wg sync.WaitGroup
	// A server that stops answering ends the storm, not the test's timeout.
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	for range n {
		wg.Go(func() {
			// As the agent's join: its own transport, a 10 s handshake
			// timeout, 30 s a request, the agent's backoff between.
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true,
				TLSHandshakeTimeout: 10 * time.Second}
			defer tr.CloseIdleConnections()
			retry := backoff.Backoff{Base: 250 * time.Millisecond, Max: 3200 * time.Millisecond, Jitter: 0.25}
			for ctx.Err() == nil {
				if joinOnce(ctx, &http.Client{Transport: tr}, url) == nil {
					return
				}
				failures.Add(1)
				retry.Wait(ctx)
			}
		})
	}
	wg.Wait()
	allDone = time.Since(start)
	if ctx.Err() != nil {
		b.Fatalf("not every client was answered within 10 minutes (%d failed attempts)", failures.Load())
	}
	var m dto.Metric
	_ = f.hub.metrics.handshakeFailures.WithLabelValues(failedTimeout).Write(&m)
	return allDone, failures.Load(), m.GetCounter().GetValue()
}

func joinOnce(ctx context.Context, c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"token":"id.secret"}`))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("join answered %s", resp.Status)
	}
	return nil
}
