package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/gorilla/handlers"
	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyLogger
	keyRoute
	keyArrived // when the request's headers were read
	keyReadOnly
)

// RequestIDHeader carries the request id in and out.
const RequestIDHeader = "X-Request-Id"

// A client's request id is echoed only when it is short and plain, so it can
// never inject into logs or headers.
var clientRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

func loggerFrom(ctx context.Context) *logrus.Entry {
	if l, ok := ctx.Value(keyLogger).(*logrus.Entry); ok {
		return l
	}
	return logrus.NewEntry(logrus.StandardLogger())
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// routeHolder lets the outer middleware learn which route the router matched.
type routeHolder struct{ template string }

// metrics are the HTTP server's Prometheus series.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	streams     prometheus.Gauge
	bodyBytes   prometheus.Gauge
	answerBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "argus", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "argus", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "HTTP request latency by route template and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "argus", Subsystem: "http", Name: "open_streams",
			Help: "Watch streams (?watch=true) open now; at --max-watch-streams more are refused with 503.",
		}),
	}
	m.bodyBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "argus", Subsystem: "http", Name: "body_bytes_reserved",
		Help: "Request body bytes reserved by requests being read and checked; at --max-body-memory more wait, then get 503.",
	})
	m.answerBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "argus", Subsystem: "http", Name: "answer_bytes_reserved",
		Help: "Answer bytes reserved by answers being written to their clients; at --max-answer-memory more wait, then get 503 or are cut.",
	})
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.streams, m.bodyBytes, m.answerBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// knownMethods bounds the method label so clients cannot mint series.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodPost: true, http.MethodPut: true, http.MethodDelete: true,
	http.MethodPatch: true, http.MethodHead: true, http.MethodOptions: true,
}

// observe is the outermost middleware: request id, contextual logger, access
// log and metrics, with a hard cap on any body.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !clientRequestID.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		// Answers carry names, labels and reasons that callers and clusters
		// chose: no browser may sniff one into a page or frame it. The
		// console's files set their own policy over this one.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; sandbox")
		log := s.opts.Logger.WithField("request_id", id)
		route := &routeHolder{}
		ctx := context.WithValue(r.Context(), keyRequestID, id)
		ctx = context.WithValue(ctx, keyLogger, log)
		ctx = context.WithValue(ctx, keyRoute, route)
		ctx = context.WithValue(ctx, keyArrived, time.Now())
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBody)

		aw := s.newAnswerWriter(w, r)
		m := httpsnoop.CaptureMetrics(next, aw, r)
		aw.finish()

		tmpl := route.template
		if tmpl == "" {
			tmpl = "unmatched"
		}
		method := r.Method
		if !knownMethods[method] {
			method = "other"
		}
		s.metrics.requests.WithLabelValues(tmpl, method, strconv.Itoa(m.Code)).Inc()
		s.metrics.duration.WithLabelValues(tmpl, method).Observe(m.Duration.Seconds())
		// The path, never the query: queries may carry tokens.
		entry := log.WithFields(logrus.Fields{
			"method": r.Method, "path": r.URL.Path, "route": tmpl, "status": m.Code,
			"bytes": m.Written, "duration_ms": float64(m.Duration) / float64(time.Millisecond),
			"remote": r.RemoteAddr,
		})
		switch {
		case m.Code >= 500:
			entry.Warn("request")
		case tmpl == "/healthz" || tmpl == "/readyz" || tmpl == "/metrics":
			entry.Debug("request")
		default:
			entry.Info("request")
		}
	})
}

// recordRoute runs inside the router, after matching, to name the route.
func recordRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := r.Context().Value(keyRoute).(*routeHolder); ok {
			if cur := mux.CurrentRoute(r); cur != nil {
				h.template, _ = cur.GetPathTemplate()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recovery turns a handler panic into a logged 500 instead of a dropped connection.
func (s *server) recovery(next http.Handler) http.Handler {
	return handlers.RecoveryHandler(
		handlers.RecoveryLogger(recoveryLogger{s.opts.Logger}),
		handlers.PrintRecoveryStack(true),
	)(next)
}

type recoveryLogger struct{ l *logrus.Entry }

func (r recoveryLogger) Println(v ...any) { r.l.Error(v...) }
