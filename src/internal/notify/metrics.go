package notify

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the notifier's Prometheus metrics. A nil *Metrics records
// nothing, so workers built without one (tests) need no checks.
type Metrics struct {
	attempts   *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	pendingG   prometheus.Gauge
	latencyH   prometheus.Histogram
}

// NewMetrics registers the notifier's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argus_notify_attempts_total",
			Help: "Callback POST attempts, by outcome (delivered, retry, failed)."}, []string{"result"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argus_notify_deliveries_total",
			Help: "Notifications that reached an end, by result (delivered, failed)."}, []string{"result"}),
		pendingG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "argus_notify_pending",
			Help: "Subscriptions with a frozen notification not yet answered."}),
		latencyH: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "argus_notify_change_to_delivery_seconds",
			Help:    "Time from a change being seen to its notification being answered 2xx.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.deliveries, m.pendingG, m.latencyH} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) attempt(o Outcome) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(o.String()).Inc()
	if o != Retry {
		m.deliveries.WithLabelValues(o.String()).Inc()
	}
}

// pending tracks a worker's pending flag; workers call it on every change
// of theirs, and the gauge is the sum of the flags.
func (m *Metrics) pending(on bool) {
	if m == nil {
		return
	}
	if on {
		m.pendingG.Inc()
	} else {
		m.pendingG.Dec()
	}
}

func (m *Metrics) latency(d time.Duration) {
	if m == nil {
		return
	}
	m.latencyH.Observe(d.Seconds())
}
