package render

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Metrics are the pool's Prometheus series; a nil *Metrics records nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	started  prometheus.Counter
}

// NewMetrics registers the pool's series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "argus_render_requests_total",
			Help: "Render worker requests (render, chart, profile), by result (ok, invalid, limit, unavailable, error)."}, []string{"op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "argus_render_duration_seconds",
			Help:    "Time of a render worker request, waiting for a worker included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"op"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "argus_render_workers_started_total",
			Help: "Render worker processes started (at start, after a kill by a limit, after their request budget)."}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.started} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) request(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrLimit):
		result = "limit"
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrTooLarge), errors.Is(err, errdefs.ErrNotFound):
		result = "invalid"
	case errors.Is(err, errdefs.ErrUnavailable):
		result = "unavailable"
	default:
		result = "error"
	}
	m.requests.WithLabelValues(op, result).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (m *Metrics) workerStarted() {
	if m != nil {
		m.started.Inc()
	}
}
