package orchestrator

import (
	"fmt"
	"net"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/rlimit"
)

// listeners are the ports the orchestrator serves and the connection
// budget they share.
type listeners struct {
	api, grpc net.Listener // grpc is nil when GRPCListen is off
	maxConns  int
	openFiles uint64
	// deliveries caps the callback deliveries in flight, from what the
	// listeners leave of the descriptors.
	deliveries int
}

// listen is the first phase: the open-file limit, and the ports. Listening
// first means a taken port fails before any store is opened, and the
// addresses are known to the callback policy as the orchestrator's own.
// Connections arriving meanwhile wait in the backlog.
func (a *App) listen(life *lifecycle) (*listeners, error) {
	soft, err := rlimit.RaiseNoFile()
	if err != nil {
		a.log.WithError(err).Warn("cannot raise the open-file limit")
	}
	maxConns, lowered := rlimit.MaxConnections(a.opts.HTTP.MaxConnections, soft)
	if lowered {
		a.log.WithFields(logrus.Fields{"requested": a.opts.HTTP.MaxConnections, "max_connections": maxConns, "open_files": soft}).
			Warn("--max-connections lowered to keep file descriptors for the stores, clusters and callbacks")
	}
	ls := &listeners{maxConns: maxConns, openFiles: soft}
	if ls.api, err = net.Listen("tcp", a.opts.Listen); err != nil {
		return nil, fmt.Errorf("orchestrator: listen on %s: %w", a.opts.Listen, err)
	}
	// The servers close what they serve; these closes are for a start-up
	// that fails before (a second close changes nothing).
	life.onStop("API listener", func() error { _ = ls.api.Close(); return nil })
	if ls.grpc, err = a.listenStatusNotify(); err != nil {
		return nil, err
	}
	if ls.grpc != nil {
		life.onStop("gRPC listener", func() error { _ = ls.grpc.Close(); return nil })
	}
	ls.deliveries = a.deliveryCap(soft, maxConns)
	return ls, nil
}

// deliveryCap is the cap on callback deliveries in flight, drawn from the
// descriptors the API's and the gRPC port's connection caps leave.
func (a *App) deliveryCap(soft uint64, maxConns int) int {
	listeners := maxConns
	if a.opts.GRPCListen != "" {
		listeners += grpcConns(maxConns)
	}
	n, lowered := rlimit.MaxDeliveries(a.opts.Notify.MaxDeliveries, soft, listeners)
	if lowered {
		a.log.WithFields(logrus.Fields{"requested": a.opts.Notify.MaxDeliveries, "max_deliveries": n, "open_files": soft}).
			Warn("--max-deliveries lowered to keep file descriptors for the stores and clusters")
	}
	return n
}
