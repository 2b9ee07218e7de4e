package orchestrator

import (
	"context"
	"fmt"
	"github.com/argus-mc/argus/src/internal/authn"
	"net"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/argus-mc/argus/src/internal/statusnotify"
)

// listenStatusNotify takes the gRPC status notification port when
// GRPCListen is set (nil otherwise), before any store is opened, as the
// API's is: a taken port fails at once, and the callback policy knows the
// address as the orchestrator's own.
func (a *App) listenStatusNotify() (net.Listener, error) {
	if a.opts.GRPCListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.opts.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: listen on %s (gRPC status notifications): %w", a.opts.GRPCListen, err)
	}
	return ln, nil
}

// serveStatusNotify adds the gRPC status notification service on the
// gRPC listener (nothing when there is none) to the lifecycle, with the
// API's TLS certificate and bearer tokens. Stopping it cuts every stream
// (they last as long as their clients).
func (a *App) serveStatusNotify(life *lifecycle, ls *listeners, w *work) error {
	if ls.grpc == nil {
		return nil
	}
	// Connections are taken before any token is checked: bounded like the
	// API's, from the same descriptor budget (a quarter of the API's cap).
	ln := netutil.LimitListener(ls.grpc, grpcConns(ls.maxConns))
	opts := statusnotify.Options{Status: w.reader, Changes: w.notifier, Logger: a.log.WithField("component", "statusnotify"),
		MaxStreams: maxStreams(a.opts.HTTP.MaxStreams, ls.maxConns)}
	if a.tokens != nil || a.readTokens != nil { // the service only reads: read-only tokens pass too
		opts.Tokens = anyToken{a.tokens, a.readTokens}
	}
	svc, err := statusnotify.New(opts)
	if err != nil {
		return err
	}
	serverOpts := svc.ServerOptions()
	if a.cert != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(a.cert.ServerConfig())))
	}
	srv := grpc.NewServer(serverOpts...)
	svc.Register(srv)
	life.add("gRPC status notifications", func(context.Context) error { return srv.Serve(ln) },
		func() error { srv.Stop(); return nil })
	a.mu.Lock()
	a.grpcAddr = ln.Addr()
	a.mu.Unlock()
	a.log.WithField("addr", ln.Addr().String()).Info("gRPC status notifications serving")
	return nil
}

// GRPCAddr is the address of the gRPC status notification service; nil
// when it is off. Valid after Ready.
func (a *App) GRPCAddr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.grpcAddr
}

// grpcConns is the gRPC port's connection cap: a quarter of the API's, at
// least 16.
func grpcConns(maxConns int) int { return max(16, maxConns/4) }

// anyToken accepts a token of any of its files (nil ones skipped).
type anyToken []*authn.TokenFile

// Valid reports a token of one of the files.
func (t anyToken) Valid(token string) bool {
	for _, f := range t {
		if f != nil && f.Valid(token) {
			return true
		}
	}
	return false
}
