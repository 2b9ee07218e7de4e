package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/semaphore"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/render"
)

// Check reports whether one dependency is usable; /readyz runs them all.
type Check func(ctx context.Context) error

// Options configures the HTTP handler. Zero values are safe defaults, except
// Catalog, which is required.
type Options struct {
	Catalog *catalog.Catalog
	// Deploy runs DIG actions; nil leaves the action routes out.
	Deploy Deployer
	// Clouds runs logical cloud actions; nil leaves those routes out.
	Clouds Clouds
	// Instances runs v1 instance actions; nil leaves those routes out.
	Instances Instances
	// Status answers status queries; nil leaves the status routes out.
	Status StatusReader
	// Subscriptions serves status subscriptions and ?watch=true; nil
	// leaves them out.
	Subscriptions Subscriptions
	// Forgetters are told, after Subscriptions, that an instance or a DIG
	// was deleted (the AAI sink removes a deleted instance from AAI).
	Forgetters []Forgetter
	// History serves …/status/history and the history events of
	// ?watch=true streams; nil leaves them out.
	History History
	// Overview serves GET /v2/overview and /v2/overview/clusters; nil
	// leaves them out. Changes, when set, lets /v2/overview?watch=true
	// follow every change.
	Overview OverviewReader
	Changes  Changes
	// Console, when set, serves the web console at / and its files under
	// /console/; they hold no data, so they are open like the probes.
	Console http.Handler
	// HeartbeatInterval is the comment heartbeat of a watch; 0 means 15s.
	HeartbeatInterval time.Duration
	// ClusterDeleted, when set, is told about a deleted cluster so its
	// watcher and cached client go too.
	ClusterDeleted func(provider, cluster string)
	// ClusterInUse, when set, lists the live contexts on a cluster; a
	// cluster with any cannot be deleted.
	ClusterInUse func(ctx context.Context, provider, cluster string) ([]string, error)
	// Tokens, when set, requires a valid bearer token on every route but
	// /healthz and /readyz; nil leaves the API open.
	Tokens TokenChecker
	// ReadTokens, when set, are bearer tokens that may only read: GET and
	// HEAD (status, streams, lists), never a write (403).
	ReadTokens TokenChecker
	// Checks run by /readyz, by name ("etcd", "mongo"); a failed check's
	// reason is shown only when its error is marked with ShowReason.
	Checks map[string]Check
	// Writable, when set, says whether the stores take writes now; while
	// it returns an error every change is answered 503 with it.
	Writable func() error
	// Logger for access and error logs; nil discards.
	Logger *logrus.Entry
	// Registerer receives the HTTP metrics; Gatherer serves /metrics. Nil
	// means a fresh registry used for both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Body limits; 0 means the SPEC section 9 defaults.
	MaxJSONBody   int64
	MaxUploadBody int64
	// MaxJSONDepth bounds the nesting of every JSON body (and of an
	// upload's metadata part); 0 means 64. Deeper → 400.
	MaxJSONDepth int
	// StreamWriteTimeout bounds each write of a ?watch=true stream: a
	// client that reads nothing for this long is cut off. The server's
	// WriteTimeout does not apply to streams. 0 means 30s.
	StreamWriteTimeout time.Duration
	// MaxBodyMemory bounds the request body bytes all requests together
	// may hold while they are read and checked; 0 means
	// DefaultMaxBodyMemory. BodyWait is how long a request waits for room
	// before it is answered 503; 0 means DefaultBodyWait.
	MaxBodyMemory int64
	BodyWait      time.Duration
	// MaxBodyMemoryPerCaller bounds what one caller (a bearer token, or a
	// remote address) may hold of the budget's general part, unless it
	// holds nothing; 0 means a quarter of it.
	MaxBodyMemoryPerCaller int64
	// MinBodyRate is the slowest, in bytes a second, a request body may
	// arrive on average once BodyRateGrace has passed; slower is cut with
	// 408. 0 means DefaultMinBodyRate; negative turns it off.
	MinBodyRate int64
	// BodyRateGrace is how long a body may take before its rate counts;
	// 0 means DefaultBodyRateGrace.
	BodyRateGrace time.Duration
	// ReadTimeout is the server's read timeout, which the minimum body
	// rate never extends; 0 means none.
	ReadTimeout time.Duration
	// MaxAnswerMemory bounds the answer bytes all requests together hold
	// while they are written (a whole answer, or the buffer of one
	// encoded as it is written); 0 means DefaultMaxAnswerMemory. An answer
	// larger than it is refused with 413.
	MaxAnswerMemory int64
	// AnswerWriteTimeout bounds each write of an answer: a client that
	// reads nothing for this long is cut off; 0 means
	// DefaultAnswerWriteTimeout. WriteTimeout, the server's, bounds the
	// whole answer still; 0 means none.
	AnswerWriteTimeout time.Duration
	WriteTimeout       time.Duration
	// MaxStreams bounds the ?watch=true streams open at once (status and
	// overview); one more is 503 with Retry-After. A stream holds its
	// connection for as long as the client likes, so without a bound one
	// caller could take every connection the server has. 0 means
	// DefaultMaxStreams.
	MaxStreams int
	// Kubeconfig says what an uploaded kubeconfig may hold beyond inline
	// data; the zero value refuses proxies (see cluster.ParseKubeconfig).
	Kubeconfig cluster.KubeconfigOptions
	// ArchiveLimits bound every chart and profile archive an upload
	// carries; each is inspected as a stream in this process before
	// Archives opens it. Zero fields are archive's defaults.
	ArchiveLimits archive.Limits
	// Archives loads uploaded charts and profiles fully (Helm's own checks);
	// nil does it in this process (render.InProcess): the orchestrator
	// passes its render pool, so this work is bounded too.
	Archives ArchiveChecker
	// CheckTimeout bounds each readiness check; 0 means 2s.
	CheckTimeout time.Duration
	// ListPageSize is how many objects a collection GET answers at most
	// when it names no ?limit=; 0 means 1000. Longer lists are paged (a
	// Link header names the next page).
	ListPageSize int
	// Replicas serves GET /v2/system/replicas; nil leaves it out.
	Replicas ReplicaSet
	// Consistency, when set, gives clients read-your-writes (see
	// RevisionHeader); nil answers from the caches as they are.
	Consistency Consistency
	// Fleet, when set, registers clusters in pull mode and joins their
	// agents (POST /v2/fleet/join, …/clusters/{c}/join-token); nil leaves
	// pull mode out.
	Fleet Fleet
}

// ArchiveChecker loads chart and profile archives as rendering will;
// CheckChart returns the chart's name.
type ArchiveChecker interface {
	CheckChart(ctx context.Context, data []byte, chartName string) (string, error)
	CheckProfile(ctx context.Context, data []byte) error
}

var (
	_ ArchiveChecker = (*render.Pool)(nil)
	_ ArchiveChecker = render.InProcess{}
)

type server struct {
	opts    Options
	metrics *metrics
	router  *mux.Router
	streams atomic.Int64 // watch streams open
	bodies  *bodyBudget
	answers *semaphore.Weighted
	// overviews is shared by the overview streams; nil without Overview
	// and Changes.
	overviews *sharedOverview
}

// New builds the complete handler: routes behind the middleware chain.
func New(opts Options) (http.Handler, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	return s.observe(s.recovery(s.authenticate(s.readOnly(s.consistent(s.router))))), nil
}

// newServer builds the server with its routes registered.
func newServer(opts Options) (*server, error) {
	if opts.Catalog == nil {
		return nil, errors.New("api: Catalog is required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Registerer == nil || opts.Gatherer == nil {
		reg := prometheus.NewRegistry()
		opts.Registerer, opts.Gatherer = reg, reg
	}
	if opts.MaxJSONBody == 0 {
		opts.MaxJSONBody = DefaultMaxJSONBody
	}
	if opts.MaxUploadBody == 0 {
		opts.MaxUploadBody = DefaultMaxUploadBody
	}
	if opts.MaxJSONDepth == 0 {
		opts.MaxJSONDepth = DefaultMaxJSONDepth
	}
	if opts.StreamWriteTimeout == 0 {
		opts.StreamWriteTimeout = 30 * time.Second
	}
	if opts.MaxBodyMemory <= 0 {
		opts.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if opts.BodyWait <= 0 {
		opts.BodyWait = DefaultBodyWait
	}
	if opts.MaxAnswerMemory <= 0 {
		opts.MaxAnswerMemory = DefaultMaxAnswerMemory
	}
	if opts.AnswerWriteTimeout <= 0 {
		opts.AnswerWriteTimeout = DefaultAnswerWriteTimeout
	}
	if opts.MinBodyRate == 0 {
		opts.MinBodyRate = DefaultMinBodyRate
	}
	if opts.BodyRateGrace <= 0 {
		opts.BodyRateGrace = DefaultBodyRateGrace
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 15 * time.Second
	}
	if opts.Archives == nil {
		opts.Archives = render.InProcess{Limits: opts.ArchiveLimits}
	}
	if opts.CheckTimeout == 0 {
		opts.CheckTimeout = 2 * time.Second
	}
	if opts.ListPageSize == 0 {
		opts.ListPageSize = 1000
	}
	if opts.ListPageSize < 0 || opts.ListPageSize > MaxListPageSize {
		return nil, fmt.Errorf("api: the list page size %d is not from 1 to %d", opts.ListPageSize, MaxListPageSize)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	s := &server{opts: opts, metrics: m, router: mux.NewRouter(), bodies: newBodyBudget(opts.MaxBodyMemory, opts.MaxBodyMemoryPerCaller, opts.MaxJSONBody),
		answers: semaphore.NewWeighted(opts.MaxAnswerMemory)}
	if opts.Overview != nil && opts.Changes != nil {
		s.overviews = newSharedOverview(opts.Overview, opts.Changes)
	}
	s.routes()
	return s, nil
}

func (s *server) routes() {
	r := s.router
	r.Use(recordRoute)
	r.NotFoundHandler = http.HandlerFunc(notFound)
	r.MethodNotAllowedHandler = http.HandlerFunc(s.methodNotAllowed)

	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/v1/healthcheck", s.healthcheck).Methods(http.MethodGet)
	r.Handle("/metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{})).Methods(http.MethodGet)

	// Routes are registered with full paths on the root router: gorilla/mux
	// subrouters turn a method mismatch into 404 instead of 405.
	// Status routes first: /v1/instance/{id}/status must not be taken for
	// an instance route.
	s.statusRoutes(r)
	s.historyRoutes(r)
	s.subscriptionRoutes(r)
	s.overviewRoutes(r)
	s.accessRoute(r)
	s.consoleRoutes(r)
	s.systemRoutes(r)
	s.v2Routes(r)
	s.emcoRoutes(r)
	s.dayTwoRoutes(r)
	s.v1Routes(r)
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	failed := s.failedChecks(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", strings.Join(failed, ", "))
		return
	}
	fmt.Fprintln(w, "ok")
}

// failedChecks runs the readiness checks and names those that fail.
func (s *server) failedChecks(ctx context.Context) []string {
	names := make([]string, 0, len(s.opts.Checks))
	for n := range s.opts.Checks {
		names = append(names, n)
	}
	sort.Strings(names)
	var failed []string
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, s.opts.CheckTimeout)
		err := s.opts.Checks[n](cctx)
		cancel()
		if err != nil {
			loggerFrom(ctx).WithError(err).WithField("check", n).Warn("readiness check failed")
			failed = append(failed, reasonOf(n, err))
		}
	}
	return failed
}

// healthcheck is k8splugin's GET /v1/healthcheck: 200 with an empty body
// when the stores answer, 500 with the reason when one does not.
func (s *server) healthcheck(w http.ResponseWriter, r *http.Request) {
	if failed := s.failedChecks(r.Context()); len(failed) > 0 {
		http.Error(w, "not healthy: "+strings.Join(failed, ", "), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// methodNotAllowed answers 405 with the Allow header a client needs.
func (s *server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if s.router.Match(probe, &match) && match.MatchErr == nil {
			allowed = append(allowed, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	http.Error(w, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path), http.StatusMethodNotAllowed)
}
