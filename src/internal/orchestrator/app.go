package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/authn"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/fleet/hub"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/loopback"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/reload"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// Options configures the orchestrator. Zero values are the documented
// defaults, except that embedded stores need DataDir.
type Options struct {
	// Listen is the API's address; "" means ":9015".
	Listen string
	// GRPCListen is the address of the gRPC status notification service
	// (EMCO's StatusNotify: emcoctl watch); "" leaves it off. EMCO's
	// clients expect port 9016.
	GRPCListen string
	// DebugListen is the address of the Go runtime's profiles
	// (/debug/pprof/); "" leaves it off. They have no authentication, so
	// it must be a loopback address.
	DebugListen string
	// DataDir holds the embedded stores' data.
	DataDir string
	// EtcdEndpoints of an external etcd; empty starts an embedded one.
	EtcdEndpoints []string
	// MongoURI of an external MongoDB; empty starts an embedded FerretDB.
	MongoURI string
	// MongoDatabase is the database name; "" means "argus".
	MongoDatabase string
	// EtcdPrefix prefixes every etcd key; "" means etcdstore.DefaultPrefix.
	EtcdPrefix string
	// Etcd keeps etcd writable: the embedded server's quota and
	// compaction, and the maintenance loop (see docs/operations.md).
	Etcd EtcdOptions
	// CatalogLimits bound what callers may store; zero fields are the
	// defaults (catalog.DefaultMaxObjectBytes, DefaultMaxProjectBytes, and
	// a quarter of the etcd quota for MaxTotalBytes).
	CatalogLimits catalog.Limits
	// MonitorSilentAfter is how long a monitor's Lease may stay unrenewed,
	// or a pull cluster's agent send no report, before the monitor is
	// Silent; 0 means appcontext.DefaultSilentAfter.
	MonitorSilentAfter time.Duration
	// V1CreateWait bounds how long POST /v1/instance waits for the first
	// apply to finish before it answers, as k8splugin answers once the
	// resources are created (a create whose apply failed is reverted and
	// answered 500); 0 means 60s.
	V1CreateWait time.Duration
	// V1CreateAsync answers POST /v1/instance as soon as the instance's
	// context exists, without waiting (nor reverting).
	V1CreateAsync bool
	// ShutdownTimeout bounds the graceful drain of HTTP requests; 0 means 4s,
	// which keeps the whole exit under 5 s.
	ShutdownTimeout time.Duration
	// CallbackAllow names host names, addresses and CIDRs subscription
	// callbacks may reach although the defaults refuse them (loopback,
	// link-local, unspecified, broadcast, multicast, cloud metadata); a
	// named host is trusted wherever it resolves.
	CallbackAllow []string
	// CallbackDeny names host names, addresses and CIDRs callbacks may
	// never reach; between the two lists the longest prefix wins, and deny
	// wins a tie. Nothing allows the orchestrator's own listen addresses.
	CallbackDeny []string
	// KubeconfigAllowProxy accepts proxy-url in cluster kubeconfigs.
	KubeconfigAllowProxy bool
	// ClusterMaxResponse bounds one answer of a cluster's API server; 0
	// means cluster.DefaultMaxResponse.
	ClusterMaxResponse int64
	// HTTP bounds client connections and requests; zero values are the
	// documented defaults.
	HTTP HTTPOptions
	// AAI configures the optional AAI inventory sink; off without a URL.
	AAI AAIOptions
	// NotifyBackoffBase scales notification retry backoff (tests); 0 is
	// the documented 1 s base capped at 60 s.
	NotifyBackoffBase time.Duration
	// AuthTokenFile names the API bearer token file (one token a line, '#'
	// comments); "" leaves the API open. /healthz, /readyz and /v1/healthcheck are always open.
	AuthTokenFile string
	// AuthReadTokenFile names a file of bearer tokens that may only read
	// (GET and HEAD: status, streams, lists; the console hides its
	// actions); same format.
	AuthReadTokenFile string
	// TLSCertFile and TLSKeyFile, both or neither, make the API serve HTTPS
	// (TLS 1.2 or later); "" serves plain HTTP.
	TLSCertFile, TLSKeyFile string
	// FileCheckInterval is how often the token and certificate files are
	// checked for changes while in use; 0 means 2s.
	FileCheckInterval time.Duration
	// FieldValidation is how clusters treat manifest fields a kind's schema
	// lacks, for DIGs and instances that do not say: Strict, Warn or
	// Ignore; "" means Warn.
	FieldValidation string
	// ListPageSize is how many objects a collection GET answers at most
	// when it names no ?limit=; 0 means 1000.
	ListPageSize int
	// HistoryLimit is how many history entries each DIG and v1 instance
	// keeps (older ones are deleted); 0 means 1000.
	HistoryLimit int
	// SelfHealDelay is how long a resource stays drifted before self-heal
	// re-applies it, and the first step of its backoff; 0 means 2s.
	SelfHealDelay time.Duration
	// RevisionLimit is how many revisions each DIG keeps for rollback
	// (older ones, and the manifests only they refer to, are deleted); 0
	// means 20.
	RevisionLimit int
	// ReplicaID names this orchestrator among the replicas sharing the
	// stores (GET /v2/system/replicas, a cluster's watcher owner); it must
	// be unique among live replicas. "" means the host name.
	ReplicaID string
	// AdvertiseURL is where clients reach this replica, for operators;
	// "" derives it from the listen address (the host name for an
	// unspecified host).
	AdvertiseURL string
	// LeaseTTL is the TTL of this replica's etcd lease: how long the work
	// of a replica that died waits before the others take it over. 0 means
	// 10s; whole seconds.
	LeaseTTL time.Duration
	// Archive bounds every chart and profile archive accepted; zero fields
	// are the archive package's defaults.
	Archive archive.Limits
	// Render bounds Helm rendering, which runs in a pool of child processes
	// of this binary; zero fields are the render package's defaults.
	Render RenderOptions
	// Fleet configures pull clusters; zero fields are the defaults.
	Fleet FleetOptions
	// Notify bounds subscriptions and callback deliveries.
	Notify NotifyOptions
	// ManifestCacheSize bounds the rendered manifests kept in memory (rsync
	// and status answers load the others from etcd when they need them);
	// 0 means appcontext.DefaultManifestCacheSize.
	ManifestCacheSize int64
	// LogicalClouds configures standard logical clouds' users.
	LogicalClouds LogicalCloudOptions
	// Logger; nil discards.
	Logger *logrus.Logger
	// Registry for metrics; nil means a fresh one with Go and process collectors.
	Registry *prometheus.Registry
}

// HTTPOptions bounds what API clients may hold: connections and the time
// each part of a request may take (see docs/security.md).
type HTTPOptions struct {
	// MaxConnections caps concurrent client connections; more wait in the
	// listen backlog. 0 means min(4096, a quarter of the open-file limit);
	// a cap that would leave fewer than 256 descriptors is lowered.
	MaxConnections int
	// ReadHeaderTimeout bounds reading a request's headers; 0 means 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; 0 means
	// 60s (a 64 MiB upload then needs about 1.1 MB/s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from its headers to the end of the
	// answer; watch streams are exempt. 0 means 2m.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle this long; 0 means 2m.
	IdleTimeout time.Duration
	// StreamWriteTimeout bounds each write of a watch stream; 0 means 30s.
	StreamWriteTimeout time.Duration
	// MaxStreams bounds the watch streams open at once; 0 means half the
	// connection cap, so streams can never hold every connection.
	MaxStreams int
	// MaxBodyMemory bounds the request body bytes held at once while they
	// are read and checked; 0 means api.DefaultMaxBodyMemory.
	MaxBodyMemory int64
	// MaxBodyMemoryPerCaller bounds what one caller (a token, or a remote
	// address) holds of it, unless it holds nothing; 0 means a quarter.
	MaxBodyMemoryPerCaller int64
	// MinBodyRate is the slowest a body may arrive (bytes a second, on
	// average after 10s); 0 means api.DefaultMinBodyRate, negative none.
	MinBodyRate int64
	// MaxAnswerMemory bounds the answer bytes held while they are written;
	// 0 means api.DefaultMaxAnswerMemory.
	MaxAnswerMemory int64
	// AnswerWriteTimeout bounds each write of an answer; 0 means
	// api.DefaultAnswerWriteTimeout.
	AnswerWriteTimeout time.Duration
	// MaxJSONDepth bounds the nesting of JSON bodies; 0 means 64.
	MaxJSONDepth int
}

func (h *HTTPOptions) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&h.ReadHeaderTimeout, 10*time.Second)
	def(&h.ReadTimeout, time.Minute)
	def(&h.WriteTimeout, 2*time.Minute)
	def(&h.IdleTimeout, 2*time.Minute)
	def(&h.StreamWriteTimeout, 30*time.Second)
	if h.MaxJSONDepth == 0 {
		h.MaxJSONDepth = api.DefaultMaxJSONDepth
	}
}

// NotifyOptions bounds what subscriptions may cost (see docs/security.md).
type NotifyOptions struct {
	// MaxSubscriptions and MaxSubscriptionsPerSubject cap the
	// subscriptions, in all and per DIG or instance; 0 means the notify
	// package's defaults.
	MaxSubscriptions, MaxSubscriptionsPerSubject int
	// MaxDeliveries caps the callback attempts in flight (each holds a
	// descriptor); 0 derives it from the open-file limit left by the
	// listeners, and a larger value is lowered to keep half of that.
	// MaxDeliveriesPerHost caps those to one receiver; 0 is a quarter.
	MaxDeliveries, MaxDeliveriesPerHost int
}

// EtcdOptions keeps etcd writable.
type EtcdOptions struct {
	// QuotaBytes is the embedded etcd's backend quota; 0 means etcd's 2
	// GiB. With an external etcd it only sizes the default catalogue limit.
	QuotaBytes int64
	// CompactionRetention is the history the embedded etcd keeps; 0 means
	// 5m.
	CompactionRetention time.Duration
	// MaintainInterval is how often the maintenance loop looks at etcd
	// (compaction past half the quota, defragmentation, the NOSPACE
	// alarm); 0 means 5s.
	MaintainInterval time.Duration
}

// LogicalCloudOptions configures standard logical clouds' users.
type LogicalCloudOptions struct {
	// CertTTL is the lifetime asked for each user certificate (the CSR's
	// expirationSeconds; clusters may cap it); at least 10m, 0 means 8h.
	// The cloud's owner renews it two thirds into its life.
	CertTTL time.Duration
	// ReservedUsers are user name prefixes no cloud may have, beside
	// Kubernetes' own system:.
	ReservedUsers []string
	// IssueTimeout is how long a cluster may take to issue a cloud's first
	// certificate before the cloud fails; 0 means 5m.
	IssueTimeout time.Duration
	// RenewAfter, for tests, renews certificates this long after they
	// were issued (or a new owner took them over) instead.
	RenewAfter time.Duration
}

func (o LogicalCloudOptions) renewAfter() func(notBefore, notAfter time.Time) time.Time {
	if o.RenewAfter == 0 {
		return nil
	}
	return func(time.Time, time.Time) time.Time { return time.Now().Add(o.RenewAfter) }
}

// AAIOptions configures the AAI sink.
type AAIOptions struct {
	// URL is AAI's versioned base URL, e.g. https://aai:8443/aai/v24.
	URL      string
	Username string
	// Password is read from a file, so it shows in no process listing.
	PasswordFile string
	// Tenants maps cloud regions to AAI tenant ids.
	Tenants map[string]string
	// SelfLink is this API's external base URL, for objects' selflink.
	SelfLink string
}

// RenderOptions configures the render worker pool.
type RenderOptions struct {
	// Workers renders at a time (and warm child processes); 0 means 2.
	Workers int
	// Timeout per render; 0 means 20s.
	Timeout time.Duration
	// MemoryLimit per worker in bytes; 0 means 512 MiB.
	MemoryLimit int64
	// MaxOutput bytes of manifests per render; 0 means 32 MiB.
	MaxOutput int64
	// MaxRequests a worker serves before it is replaced; 0 means 200.
	MaxRequests int
}

// App is one orchestrator process.
type App struct {
	opts  Options
	log   *logrus.Entry
	ready chan struct{}
	// tokens and cert are loaded by New, so a bad file is a configuration
	// error found before any store is opened; nil when not configured.
	tokens *authn.TokenFile
	// readTokens may only read (GET, HEAD).
	readTokens *authn.TokenFile
	cert       *reload.Certificate

	mu       sync.Mutex
	addr     net.Addr
	grpcAddr net.Addr
}

// New validates opts and returns an App ready to Run.
func New(opts Options) (*App, error) {
	if opts.Listen == "" {
		opts.Listen = ":9015"
	}
	opts.EtcdPrefix = etcdstore.Prefix(opts.EtcdPrefix)
	if opts.MongoDatabase == "" {
		opts.MongoDatabase = "argus"
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 4 * time.Second
	}
	opts.HTTP.defaults()
	h := opts.HTTP
	if h.MaxConnections < 0 || h.MaxStreams < 0 || h.MaxBodyMemory < 0 || h.MaxAnswerMemory < 0 || h.MaxJSONDepth < 0 ||
		min(h.ReadHeaderTimeout, h.ReadTimeout, h.WriteTimeout, h.IdleTimeout, h.StreamWriteTimeout, h.AnswerWriteTimeout) < 0 {
		return nil, errors.New("orchestrator: connection limits and timeouts cannot be negative")
	}
	if opts.DebugListen != "" && !loopback.Addr(opts.DebugListen) {
		return nil, fmt.Errorf("orchestrator: --debug-listen %q: profiles have no authentication, so only a loopback address (127.0.0.1:port, [::1]:port, localhost:port) is allowed", opts.DebugListen)
	}
	if opts.HistoryLimit < 0 {
		return nil, errors.New("orchestrator: --history-limit cannot be negative")
	}
	if opts.RevisionLimit < 0 {
		return nil, errors.New("orchestrator: --revision-limit cannot be negative")
	}
	if opts.LeaseTTL < 0 {
		return nil, errors.New("orchestrator: --lease-ttl cannot be negative")
	}
	if opts.MonitorSilentAfter < 0 || opts.Fleet.Heartbeat < 0 || opts.Fleet.LastSeenInterval < 0 {
		return nil, errors.New("orchestrator: --monitor-silent-after, --fleet-heartbeat and --fleet-last-seen-interval cannot be negative")
	}
	if silent, hb := cmp.Or(opts.MonitorSilentAfter, appcontext.DefaultSilentAfter), hub.ReportInterval(opts.Fleet.Heartbeat); hb >= silent {
		return nil, fmt.Errorf("orchestrator: --fleet-heartbeat (%s) must be shorter than --monitor-silent-after (%s), or every idle agent's monitor is Silent between its reports", hb, silent)
	}
	if t := opts.LogicalClouds.CertTTL; t != 0 && t < 10*time.Minute {
		return nil, errors.New("orchestrator: --logical-cloud-cert-ttl must be at least 10m, the least a cluster issues")
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.ReplicaID == "" {
		opts.ReplicaID, _ = os.Hostname()
		if opts.ReplicaID == "" {
			opts.ReplicaID = "orchestrator"
		}
	}
	if strings.Contains(opts.ReplicaID, "/") {
		return nil, fmt.Errorf("orchestrator: --replica-id %q contains '/'", opts.ReplicaID)
	}
	if err := notify.CheckPolicy(opts.CallbackAllow, opts.CallbackDeny); err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = logging.Discard()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if opts.DataDir == "" && (len(opts.EtcdEndpoints) == 0 || opts.MongoURI == "") {
		return nil, errors.New("orchestrator: --data-dir is required for the embedded stores")
	}
	if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
		return nil, errors.New("orchestrator: --tls-cert-file and --tls-key-file go together: give both or neither")
	}
	a := &App{opts: opts, log: logrus.NewEntry(opts.Logger), ready: make(chan struct{})}
	if opts.AuthTokenFile != "" {
		tokens, err := authn.NewTokenFile(authn.Options{Path: opts.AuthTokenFile, Interval: opts.FileCheckInterval,
			Logger: a.log.WithField("component", "authn")})
		if err != nil {
			return nil, fmt.Errorf("orchestrator: --auth-token-file: %w", err)
		}
		a.tokens = tokens
	}
	if opts.AuthReadTokenFile != "" {
		tokens, err := authn.NewTokenFile(authn.Options{Path: opts.AuthReadTokenFile, Interval: opts.FileCheckInterval,
			Logger: a.log.WithField("component", "authn")})
		if err != nil {
			return nil, fmt.Errorf("orchestrator: --auth-read-token-file: %w", err)
		}
		a.readTokens = tokens
	}
	if opts.TLSCertFile != "" {
		cert, err := reload.NewCertificate(reload.CertificateOptions{CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile,
			Interval: opts.FileCheckInterval, Logger: a.log.WithField("component", "tls")})
		if err != nil {
			return nil, fmt.Errorf("orchestrator: --tls-cert-file/--tls-key-file: %w", err)
		}
		a.cert = cert
	}
	return a, nil
}

// Ready is closed once the API serves and the stores are open.
func (a *App) Ready() <-chan struct{} { return a.ready }

// Addr is the address the API listens on; valid after Ready.
func (a *App) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// Run opens the stores, serves the API until ctx ends, then drains requests
// and closes the stores. It returns nil after a clean shutdown.
//
// It goes through phases, each in a file of its own: listen (the ports),
// stores (etcd, MongoDB, the replica set, the catalogue), work (the parts
// that do the orchestrator's work and their background runs) and serve
// (the API and the gRPC status notifications). Each phase adds its parts
// to one lifecycle, which starts them in order and stops them in reverse
// however Run ends.
func (a *App) Run(ctx context.Context) (err error) {
	start := time.Now()
	life := newLifecycle(a.log)
	defer func() { err = errors.Join(err, life.stop()) }()
	ls, err := a.listen(life)
	if err != nil {
		return err
	}
	st, err := a.openStores(ctx, life, ls, start)
	if err != nil {
		return err
	}
	w, err := a.buildWork(ctx, life, st, ls)
	if err != nil {
		return err
	}
	life.start(ctx)
	if ok, err := a.awaitWork(ctx, st, w); !ok {
		return err
	}
	return a.serve(ctx, life, ls, st, w, start)
}
