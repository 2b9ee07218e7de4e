package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"golang.org/x/net/netutil"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/console"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/fleet/hub"
	"github.com/argus-mc/argus/src/internal/ownership"
	"github.com/argus-mc/argus/src/internal/status"
)

// awaitWork waits until the work may be served: subscriptions resume
// before the API serves, so none is missing from it; and the replica
// registers first, so what the API starts is signed with its lease (a
// replica whose id another process still holds waits for that lease to
// go). While etcd is out of space no lease can be granted: the replica
// serves reads, refuses changes (the write gate, apiOptions) and registers
// once space is freed. ok is false when ctx ended first.
func (a *App) awaitWork(ctx context.Context, st *stores, w *work) (ok bool, err error) {
	readies := []<-chan struct{}{w.notifier.Ready(), st.replicas.Ready()}
	if err := st.etcd.NoSpace(); err != nil {
		a.log.WithError(err).Error("serving reads only until etcd has space again")
		readies = readies[:1]
	}
	for _, ready := range readies {
		select {
		case <-ready:
		case <-w.notifierRun.exited:
			return false, fmt.Errorf("orchestrator: notifier: %w", w.notifierRun.err)
		case <-ctx.Done():
			return false, nil
		}
	}
	return true, nil
}

// serve is the last phase: the API and the gRPC status notifications
// serve until ctx ends or the API's server fails; their stops (in the
// lifecycle) drain the requests.
func (a *App) serve(ctx context.Context, life *lifecycle, ls *listeners, st *stores, w *work, start time.Time) error {
	handler, err := api.New(a.apiOptions(ls, st, w))
	if err != nil {
		return err
	}
	conns, err := newConnMetrics(a.opts.Registry, ls.maxConns)
	if err != nil {
		return err
	}
	if err := a.serveStatusNotify(life, ls, w); err != nil {
		return err
	}
	if err := a.serveDebug(ctx, life); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           w.fleet.hub.Handler(handler), // the agents' streams on the API's port
		ReadHeaderTimeout: a.opts.HTTP.ReadHeaderTimeout,
		ReadTimeout:       a.opts.HTTP.ReadTimeout,
		WriteTimeout:      a.opts.HTTP.WriteTimeout,
		IdleTimeout:       a.opts.HTTP.IdleTimeout,
		ConnState:         conns.track,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(serverLog{a.log.WithField("component", "http")}, "", 0),
	}
	// Connections beyond the cap wait in the kernel's backlog; running out
	// of descriptors anyway makes Serve back off and retry, never exit.
	ln := netutil.LimitListener(ls.api, ls.maxConns)
	serveHTTP2(srv)
	if a.cert != nil {
		srv.TLSConfig = a.cert.ServerConfig()
		// Agents that offer the fleet's ALPN protocols are served on the
		// stream's own framing or gRPC's own transport, on this port; the
		// rest (h2, HTTP/1.1) as before.
		ln = w.fleet.hub.ListenTLS(srv, ln, hub.ListenOptions{Open: conns.open})
	}
	served := life.add("API", func(context.Context) error {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) { // the drain below
			return nil
		}
		return err
	}, func() error { a.drain(srv); return nil })
	// Stopped before the drain: agents' streams last as long as their
	// agents and would hold it; the agents reconnect elsewhere.
	life.onStop("fleet streams", func() error { w.fleet.hub.Stop(); return nil })
	life.start(ctx)

	a.mu.Lock()
	a.addr = ls.api.Addr()
	a.mu.Unlock()
	close(a.ready)
	a.log.WithFields(logrus.Fields{"addr": ls.api.Addr().String(), "tls": a.cert != nil, "auth": a.tokens != nil,
		"max_connections": ls.maxConns, "max_deliveries": ls.deliveries, "open_files": ls.openFiles,
		"startup_ms": time.Since(start).Milliseconds()}).Info("orchestrator serving")

	select {
	case <-served.exited:
		return fmt.Errorf("orchestrator: serve: %w", served.err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down")
	return nil
}

// drain shuts the API's server down: requests get ShutdownTimeout to
// finish, and those still running after it are cut off.
func (a *App) drain(srv *http.Server) {
	sctx, cancel := context.WithTimeout(context.Background(), a.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
}

// apiOptions wires the API to the work.
func (a *App) apiOptions(ls *listeners, st *stores, w *work) api.Options {
	opts := api.Options{
		Catalog:       st.catalog,
		Deploy:        w.deployer,
		Clouds:        w.clouds,
		Instances:     w.deployer,
		Status:        w.reader,
		Subscriptions: w.notifier,
		History:       w.histories,
		Overview:      overviews{Reader: w.reader, replica: a.opts.ReplicaID, clusters: w.kinds.clusters},
		Replicas:      replicaView{set: st.replicas},
		Consistency:   consistency{cli: st.etcd.Client, cache: w.cache},
		Changes:       w.notifier,
		Console:       console.Handler(),
		Fleet:         w.fleet.join,
		ClusterInUse: func(ctx context.Context, provider, name string) ([]string, error) {
			return liveOn(ctx, w.cache, w.contexts, appcontext.ClusterRef{Provider: provider, Name: name})
		},
		ClusterDeleted: func(provider, name string) {
			ref := appcontext.ClusterRef{Provider: provider, Name: name}
			w.watchers.Forget(ref)
			w.clusters.Forget(ref)
		},
		Checks: map[string]api.Check{
			"etcd":  st.etcd.Ping,
			"mongo": st.mongo.Ping,
			// A replica waiting for its id (another process holds it) owns
			// no work yet.
			"replica": func(context.Context) error {
				if st.replicas.Lease() == 0 {
					return fmt.Errorf("replica %s is not registered yet", a.opts.ReplicaID)
				}
				return nil
			},
			"etcd-space": func(context.Context) error { return api.ShowReason(st.etcd.NoSpace()) },
		},
		// Nothing is half written while etcd refuses writes, and nothing
		// is started before this replica holds a lease to sign it with.
		Writable: func() error {
			if err := st.etcd.NoSpace(); err != nil {
				return err
			}
			if st.replicas.Lease() == 0 || !st.catalog.Indexed() {
				return errdefs.Unavailable(nil, "replica %s is not registered yet", a.opts.ReplicaID)
			}
			return nil
		},
		ArchiveLimits:          a.opts.Archive,
		Archives:               w.renderer,
		Logger:                 a.log.WithField("component", "api"),
		Registerer:             a.opts.Registry,
		Gatherer:               a.opts.Registry,
		Kubeconfig:             w.kubeconfigs,
		MaxJSONDepth:           a.opts.HTTP.MaxJSONDepth,
		ListPageSize:           a.opts.ListPageSize,
		StreamWriteTimeout:     a.opts.HTTP.StreamWriteTimeout,
		MaxStreams:             maxStreams(a.opts.HTTP.MaxStreams, ls.maxConns),
		MaxBodyMemory:          a.opts.HTTP.MaxBodyMemory,
		MaxBodyMemoryPerCaller: a.opts.HTTP.MaxBodyMemoryPerCaller,
		MinBodyRate:            a.opts.HTTP.MinBodyRate,
		ReadTimeout:            a.opts.HTTP.ReadTimeout,
		MaxAnswerMemory:        a.opts.HTTP.MaxAnswerMemory,
		AnswerWriteTimeout:     a.opts.HTTP.AnswerWriteTimeout,
		WriteTimeout:           a.opts.HTTP.WriteTimeout,
	}
	if w.sink != nil { // never a typed nil in the slice
		opts.Forgetters = append(opts.Forgetters, w.sink)
	}
	if a.tokens != nil { // never a typed nil in the interface
		opts.Tokens = a.tokens
	}
	if a.readTokens != nil {
		opts.ReadTokens = a.readTokens
	}
	return opts
}

// liveOn lists the contexts still live on a cluster, as etcd has them: the
// cache may trail etcd by a moment either way (a v1 client deletes its
// cloud region right after its instance's deletion finished; an instantiate
// may have recorded a context the cache has not seen yet), and a cluster
// must never be deleted from under a live context.
func liveOn(ctx context.Context, cache *appcontext.Cache, contexts *appcontext.Store, ref appcontext.ClusterRef) ([]string, error) {
	ids, err := cache.LiveOn(ctx, ref)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 { // confirm the absence too, with a range read
		list, err := contexts.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sm := range list {
			if sm.Status.Status != appcontext.Terminated {
				ids = append(ids, sm.Meta.ID)
			}
		}
	}
	var live []string
	for _, id := range ids {
		c, err := contexts.Get(ctx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if c.Status.Status == appcontext.Terminated {
			continue
		}
		for _, p := range c.Placements {
			if p.Cluster == ref {
				live = append(live, id)
				break
			}
		}
	}
	return live, nil
}

// overviews answers the console's overview queries; a cluster's watcher
// runs on the replica holding the cluster's claim.
type overviews struct {
	*status.Reader
	replica  string
	clusters *ownership.Kind
}

func (o overviews) ClusterOverview(ctx context.Context) (status.ClusterOverview, error) {
	return o.Reader.ClusterOverview(ctx, o.replica, o)
}

func (o overviews) WatcherOwner(ref appcontext.ClusterRef) string {
	return o.clusters.Holder(ref.String())
}

var _ api.OverviewReader = overviews{}

// serverLog carries net/http's own messages into the structured log. TLS
// handshake failures are what port scanners and plain-HTTP clients cause,
// so they are debug noise; anything else is worth a warning.
type serverLog struct{ e *logrus.Entry }

func (l serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		l.e.Debug(msg)
	} else {
		l.e.Warn(msg)
	}
	return len(p), nil
}

// connMetrics count the API's open connections against the cap.
type connMetrics struct{ open prometheus.Gauge }

func newConnMetrics(reg prometheus.Registerer, limit int) (*connMetrics, error) {
	m := &connMetrics{open: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "http", Name: "open_connections",
		Help: "API client connections open now."})}
	capacity := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "http", Name: "max_connections",
		Help: "The cap on API client connections; more wait in the listen backlog."})
	capacity.Set(float64(limit))
	for _, c := range []prometheus.Collector{m.open, capacity} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("orchestrator: register connection metrics: %w", err)
		}
	}
	return m, nil
}

func (m *connMetrics) track(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		m.open.Inc()
	case http.StateClosed, http.StateHijacked:
		m.open.Dec()
	}
}

// maxStreams is the watch stream cap: as asked, else half the connection
// cap (at least one), leaving the other half to ordinary requests.
func maxStreams(asked, maxConns int) int {
	if asked > 0 {
		return asked
	}
	return max(1, maxConns/2)
}
