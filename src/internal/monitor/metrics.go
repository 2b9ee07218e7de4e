package monitor

import "github.com/prometheus/client_golang/prometheus"

// metrics are the monitor's Prometheus series.
type metrics struct {
	writes    prometheus.Counter
	conflicts prometheus.Counter
	errors    prometheus.Counter
	trimmed   prometheus.Counter
	syncs     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, m *Monitor) (*metrics, error) {
	x := &metrics{
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "status_writes_total", Help: "ResourceBundleState status writes."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "status_write_conflicts_total", Help: "Status writes refused because the bundle changed; retried."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "status_write_errors_total", Help: "Status writes that failed for another reason; retried with backoff."}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "status_trimmed_writes_total", Help: "Status writes whose entries were trimmed to fit the size limit."}),
		syncs: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "bundle_sync_duration_seconds", Help: "Time to rebuild and write one bundle's status.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	collectors := []prometheus.Collector{x.writes, x.conflicts, x.errors, x.trimmed, x.syncs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "objects_tracked", Help: "Labelled objects in the monitor's caches."},
			func() float64 { return float64(m.objectsTracked()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "bundles", Help: "ResourceBundleStates the monitor keeps current."},
			func() float64 { return float64(len(m.bundleInformer.GetStore().ListKeys())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "queue_depth", Help: "Bundles waiting for a sync."},
			func() float64 { return float64(m.bundles.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "monitor",
			Name: "unwatched_kinds", Help: "Wanted kinds that cannot be watched."},
			func() float64 { return float64(len(m.unwatched())) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return x, nil
}
