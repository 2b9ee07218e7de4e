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
	// LastSeenInterval is how often a connected pull cluster's last-seen
	// time is written while nothing else is (it is also written when its
	// stream ends or its agent goes silent); 0 means 5m.
	LastSeenInterval time.Duration
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
}

// buildFleet is the fleet part of the work phase, before rsync (which
// hands pull clusters' placements to the hub) and the watchers (which
// never dial a pull cluster). The pull clusters' records are loaded here,
// before anything may ask whether a cluster is one; the hub runs with the
// other background work, its keepers shared among replicas as
// kindPullClusters; its streams end before the API's server drains (serve).
func (a *App) buildFleet(ctx context.Context, life *lifecycle, st *stores, w *work) error {
	js, err := join.New(join.Options{Client: st.etcd.Client, Prefix: a.opts.EtcdPrefix, TokenTTL: a.opts.Fleet.JoinTokenTTL,
		Forget: func(ref appcontext.ClusterRef) []clientv3.Op {
			return hub.ForgetOps(a.opts.EtcdPrefix, w.contexts.ClusterStateKey(ref), ref)
		},
		Logger: a.log.WithField("component", "join")})
	if err != nil {
		return err
	}
	keepers := st.replicas.Kind(kindPullClusters, nil)
	h, err := hub.New(hub.Options{Client: st.etcd.Client, Contexts: w.contexts, Observed: w.cache, Credentials: js, Prefix: a.opts.EtcdPrefix,
		Replica: a.opts.ReplicaID, Claims: keepers, LeaseTTL: a.opts.LeaseTTL,
		UnreachableAfter: a.opts.Fleet.UnreachableAfter, SilentAfter: a.opts.MonitorSilentAfter, Heartbeat: a.opts.Fleet.Heartbeat,
		LastSeenInterval: a.opts.Fleet.LastSeenInterval,
		MaxAgents:        a.opts.Fleet.MaxAgents, Registerer: a.opts.Registry, Logger: a.log.WithField("component", "fleet")})
	if err != nil {
		return err
	}
	keepers.Handle(h)
	w.fleet = &fleet{join: js, hub: h}
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- js.Run(jctx) }()
	stop := func() error {
		cancel()
		return <-done
	}
	life.onStop("pull clusters' records", stop)
	select {
	case <-js.Ready():
	case err := <-done:
		done <- err
		return errors.Join(errors.New("orchestrator: load the pull clusters"), err)
	case <-ctx.Done():
		return ctx.Err()
	}
	life.add("fleet hub", h.Run, nil)
	return nil
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
