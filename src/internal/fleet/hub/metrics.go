package hub

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// metrics are the hub's Prometheus metrics.
type metrics struct {
	agents prometheus.Gauge
	// streams are the agents' streams by the transport they came on
	// (native, http2).
	streams *prometheus.GaugeVec
	reports prometheus.Counter
	txns    prometheus.Counter
	ops     prometheus.Counter
	batches prometheus.Counter
	// refused counts streams refused by the replica's or a cluster's
	// limits; throttled, reports that waited for their cluster's write
	// budget.
	refused   *prometheus.CounterVec
	throttled prometheus.Counter
	// handshakeFailures are the API port's TLS handshakes (ListenTLS)
	// that failed: a burst of clients passing their deadline shows here.
	handshakeFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		agents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "fleet", Name: "agents_connected",
			Help: "Pull clusters' agents with a stream to this replica."}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "fleet", Name: "streams",
			Help: "Agents' streams to this replica by transport: framed (the stream's own framing, TLS ALPN " + pb.FramedALPN + "), native (gRPC's own HTTP/2, TLS ALPN " + pb.ALPN + ": older agents, agents through an HTTPS proxy) or http2 (through the API server's HTTP/2: plain-http loopback agents, agents behind an L7 proxy, agents older still)."},
			[]string{"transport"}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "reports_total",
			Help: "Status reports received from agents."}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "write_transactions_total",
			Help: "etcd transactions that stored what agents reported."}),
		ops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "write_operations_total",
			Help: "etcd writes of what agents reported (several per transaction)."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "work_batches_total",
			Help: "Work batches sent to agents."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "streams_refused_total",
			Help: "Agents' streams refused: the replica full, the cluster holding as many streams as it may, or reconnecting too often."}, []string{"reason"}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "reports_throttled_total",
			Help: "Status reports that waited for their cluster's etcd write budget."}),
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "argus", Subsystem: "http", Name: "tls_handshake_failures_total",
			Help: "TLS handshakes on the API's port that failed: timeout (not done within the server's shortest timeout), plain_http (an http:// client on the TLS port), error (anything else: a bad ClientHello, a closed connection)."},
			[]string{"reason"}),
	}
	for _, r := range []string{failedTimeout, failedPlainHTTP, failedError} {
		m.handshakeFailures.WithLabelValues(r)
	}
	for _, t := range []string{transportFramed, transportNative, transportHTTP2} {
		m.streams.WithLabelValues(t) // shown as 0 before the first
	}
	for _, c := range []prometheus.Collector{m.agents, m.streams, m.reports, m.txns, m.ops, m.batches, m.refused, m.throttled,
		m.handshakeFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("hub: register metrics: %w", err)
		}
	}
	return m, nil
}
