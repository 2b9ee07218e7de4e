package hub

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the hub's Prometheus metrics.
type metrics struct {
	agents  prometheus.Gauge
	reports prometheus.Counter
	txns    prometheus.Counter
	ops     prometheus.Counter
	batches prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		agents: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "fleet", Name: "agents_connected",
			Help: "Pull clusters' agents with a stream to this replica."}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "reports_total",
			Help: "Status reports received from agents."}),
		txns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "write_transactions_total",
			Help: "etcd transactions that stored what agents reported."}),
		ops: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "write_operations_total",
			Help: "etcd writes of what agents reported (several per transaction)."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "fleet", Name: "work_batches_total",
			Help: "Work batches sent to agents."}),
	}
	for _, c := range []prometheus.Collector{m.agents, m.reports, m.txns, m.ops, m.batches} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("hub: register metrics: %w", err)
		}
	}
	return m, nil
}
