package hub

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	"golang.org/x/net/netutil"

	"github.com/argus-mc/argus/src/internal/fleet/agent"
)

// BenchmarkJoinStorm is a fleet's agents all joining at once, and nothing
// else on the machine: ARGUS_STORM_CLIENTS agents (1,000 unless set) join
// with the agent's own code (its transport, timeouts and backoff) at the
// API port served through ListenTLS with the orchestrator's default
// timeouts and a connection cap that fits them all (as --max-connections
// must fit a fleet's streams). The answer is a fixed one: no join
// transaction behind it. It reports the time until every agent was
// answered, the agents' failed attempts and
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
	url := "https://" + ln.Addr().String()
	// Each client is an agent (its own join transport, timeouts and
	// backoff); it logs each failed attempt at warning level.
	var failures atomic.Int64
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.AddHook(countWarnings{&failures})
	// A server that stops answering ends the storm, not the test's timeout.
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	agents := make([]*agent.Agent, n)
	for i := range agents {
		a, err := agent.New(agent.Options{Orchestrators: []string{url}, RootCAs: roots, JoinToken: "id.secret",
			Cluster: newMemCluster(), Credentials: &memCredentials{}, Logger: logrus.NewEntry(log)})
		if err != nil {
			b.Fatal(err)
		}
		agents[i] = a
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for i, a := range agents {
		wg.Go(func() { _, errs[i] = a.Join(ctx) })
	}
	wg.Wait()
	allDone = time.Since(start)
	if ctx.Err() != nil {
		b.Fatalf("not every agent was answered within 10 minutes (%d failed attempts)", failures.Load())
	}
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("joins refused: %.500v", err)
	}
	var m dto.Metric
	_ = f.hub.metrics.handshakeFailures.WithLabelValues(failedTimeout).Write(&m)
	return allDone, failures.Load(), m.GetCounter().GetValue()
}

// countWarnings counts the log entries at warning level: an agent's
// failed join attempts.
type countWarnings struct{ n *atomic.Int64 }

func (countWarnings) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }
func (c countWarnings) Fire(*logrus.Entry) error {
	c.n.Add(1)
	return nil
}
