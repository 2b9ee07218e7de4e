package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug serves the Go runtime's profiles on DebugListen, apart from
// the API: profiles show internals, so they are never on the API's port
// and only a loopback address is accepted (New). The command line is not
// served: --mongo-uri may carry a password. Fleet benchmarks read the
// orchestrator's own heap and CPU profiles through it.
func (a *App) serveDebug(ctx context.Context, life *lifecycle) error {
	if a.opts.DebugListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.opts.DebugListen)
	if err != nil {
		return fmt.Errorf("orchestrator: listen on %s (profiles): %w", a.opts.DebugListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	a.log.WithField("addr", ln.Addr().String()).Info("serving profiles")
	life.add("profiles", func(context.Context) error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func() error { return srv.Close() })
	return nil
}
