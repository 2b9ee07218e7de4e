package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/hub"
	"github.com/argus-mc/argus/src/internal/fleet/join"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// FleetOptions configures pull clusters (fleet mode, docs/fleet.md).
type FleetOptions struct {
	// JoinTokenTTL is how long a join token may be exchanged; 0 means 1h.
	JoinTokenTTL time.Duration
	// UnreachableAfter is how long a pull cluster may have no stream from
	// its agent before it is Unreachable; 0 means 15s.
	UnreachableAfter time.Duration
	// Heartbeat is how often agents report when nothing changed; 0 means
	// 10s.
	Heartbeat time.Duration
	// MaxAgents bounds the agents' streams one replica serves; 0 means 20000.
	MaxAgents int
}

// kindPullClusters is the ownership kind of the pull clusters' keepers.
const kindPullClusters = "pullclusters"

// fleet is the pull clusters' side of the orchestrator: the join service
// (registrations and agents' credentials) and the hub that serves the
// agents.
type fleet struct {
	join *join.Service
	hub  *hub.Hub
	stop func() // stops the join service's watch and waits for it
}

// startFleet builds the fleet side and loads the pull clusters' records
// before anything may dial a cluster: a pull cluster must never get a
// watcher. The hub runs with the other background work; its keepers are
// shared among replicas as kindPullClusters.
func (a *App) startFleet(ctx context.Context, cli *clientv3.Client, contexts *appcontext.Store, cache *appcontext.Cache, replicas *ownership.Set) (*fleet, error) {
	js, err := join.New(join.Options{Client: cli, Prefix: a.opts.EtcdPrefix, TokenTTL: a.opts.Fleet.JoinTokenTTL,
		Logger: a.log.WithField("component", "join")})
	if err != nil {
		return nil, err
	}
	keepers := &lateHandler{}
	h, err := hub.New(hub.Options{Client: cli, Contexts: contexts, Observed: cache, Credentials: js, Prefix: a.opts.EtcdPrefix,
		Replica: a.opts.ReplicaID, Claims: replicas.Kind(kindPullClusters, keepers), LeaseTTL: a.opts.LeaseTTL,
		UnreachableAfter: a.opts.Fleet.UnreachableAfter, SilentAfter: a.opts.MonitorSilentAfter, Heartbeat: a.opts.Fleet.Heartbeat,
		MaxAgents: a.opts.Fleet.MaxAgents, Registerer: a.opts.Registry, Logger: a.log.WithField("component", "fleet")})
	if err != nil {
		return nil, err
	}
	keepers.set(h.Acquired, h.Released)
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- js.Run(jctx) }()
	f := &fleet{join: js, hub: h, stop: func() {
		cancel()
		if err := <-done; err != nil {
			a.log.WithError(err).Warn("pull clusters' records stopped")
		}
	}}
	select {
	case <-js.Ready():
		return f, nil
	case err := <-done:
		done <- err
		f.stop()
		return nil, errors.Join(errors.New("orchestrator: load the pull clusters"), err)
	case <-ctx.Done():
		f.stop()
		return nil, ctx.Err()
	}
}

// serveHTTP2 lets the API's server carry the agents' gRPC streams:
// HTTP/2 over TLS, and without TLS (prior knowledge, as gRPC speaks it on
// a plain connection; agents use it to loopback addresses only). A peer
// silent for 45 s is probed, and dropped when it does not answer.
func serveHTTP2(srv *http.Server) {
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
}
