package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/net/netutil"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/authn"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/console"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/ownership"
	"github.com/argus-mc/argus/src/internal/reload"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/rlimit"
	"github.com/argus-mc/argus/src/internal/rsync"
	"github.com/argus-mc/argus/src/internal/status"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
	"github.com/argus-mc/argus/src/internal/watcher"
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
	// DataDir holds the embedded stores' data.
	DataDir string
	// EtcdEndpoints of an external etcd; empty starts an embedded one.
	EtcdEndpoints []string
	// MongoURI of an external MongoDB; empty starts an embedded FerretDB.
	MongoURI string
	// MongoDatabase is the database name; "" means "argus".
	MongoDatabase string
	// EtcdPrefix prefixes every etcd key; "" means "/argus".
	EtcdPrefix string
	// MonitorSilentAfter is how long a monitor's Lease may stay unrenewed
	// before the monitor is Silent; 0 means 30s.
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
	// Notify bounds subscriptions and callback deliveries.
	Notify NotifyOptions
	// ManifestCacheSize bounds the rendered manifests kept in memory (rsync
	// and status answers load the others from etcd when they need them);
	// 0 means appcontext.DefaultManifestCacheSize.
	ManifestCacheSize int64
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
	// MaxJSONDepth bounds the nesting of JSON bodies; 0 means 64.
	MaxJSONDepth int
	// MaxAnswerMemory bounds the answer bytes held while they are written;
	// 0 means api.DefaultMaxAnswerMemory.
	MaxAnswerMemory int64
	// AnswerWriteTimeout bounds each write of an answer; 0 means
	// api.DefaultAnswerWriteTimeout.
	AnswerWriteTimeout time.Duration
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
	cert   *reload.Certificate

	mu       sync.Mutex
	addr     net.Addr
	grpcAddr net.Addr
}

// New validates opts and returns an App ready to Run.
func New(opts Options) (*App, error) {
	if opts.Listen == "" {
		opts.Listen = ":9015"
	}
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
	if opts.HistoryLimit < 0 {
		return nil, errors.New("orchestrator: --history-limit cannot be negative")
	}
	if opts.RevisionLimit < 0 {
		return nil, errors.New("orchestrator: --revision-limit cannot be negative")
	}
	if opts.LeaseTTL < 0 {
		return nil, errors.New("orchestrator: --lease-ttl cannot be negative")
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
func (a *App) Run(ctx context.Context) (err error) {
	start := time.Now()
	soft, rerr := rlimit.RaiseNoFile()
	if rerr != nil {
		a.log.WithError(rerr).Warn("cannot raise the open-file limit")
	}
	maxConns, lowered := rlimit.MaxConnections(a.opts.HTTP.MaxConnections, soft)
	if lowered {
		a.log.WithFields(logrus.Fields{"requested": a.opts.HTTP.MaxConnections, "max_connections": maxConns, "open_files": soft}).
			Warn("--max-connections lowered to keep file descriptors for the stores, clusters and callbacks")
	}
	// Listening first: a taken port fails before any store is opened, and
	// the address is known to the callback policy as the orchestrator's own.
	// Connections arriving meanwhile wait in the backlog.
	ln, err := net.Listen("tcp", a.opts.Listen)
	if err != nil {
		return fmt.Errorf("orchestrator: listen on %s: %w", a.opts.Listen, err)
	}
	serving := false
	defer func() {
		if !serving {
			_ = ln.Close()
		}
	}()
	grpcLn, err := a.listenStatusNotify()
	if err != nil {
		return err
	}
	defer func() {
		if grpcLn != nil && !serving {
			_ = grpcLn.Close()
		}
	}()
	etcd, mongo, err := a.openStores(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, mongo.Close(cctx), etcd.Close())
		a.log.Info("stores closed")
	}()

	prefix := a.opts.EtcdPrefix
	if prefix == "" {
		prefix = "/argus"
	}
	// Work is shared with the other replicas on these stores (alone, this
	// replica owns everything): each cluster's watcher, each group's rsync
	// actions and history, each subscription's worker and the AAI sink
	// run on exactly one live replica.
	replicas, err := ownership.New(ownership.Options{Client: etcd.Client, Prefix: prefix, ID: a.opts.ReplicaID,
		URL: advertiseURL(a.opts.AdvertiseURL, ln.Addr(), a.cert != nil), TTL: a.opts.LeaseTTL,
		Registerer: a.opts.Registry, Logger: a.log.WithField("component", "ownership")})
	if err != nil {
		return err
	}
	cat, err := catalog.New(ctx, mongo.DB, catalog.AllKinds()...)
	if err != nil {
		return err
	}
	// Markers (an upload in flight, a delete in progress) are signed with
	// this replica's lease, so another replica starting never clears them,
	// and those of a replica that died are cleared as soon as its lease is
	// gone.
	cat.SetOwner(catalog.Owner{ID: a.opts.ReplicaID, Lease: func() int64 { return int64(replicas.Lease()) },
		Alive: func(ctx context.Context, lease int64) (bool, error) {
			resp, err := etcd.Client.TimeToLive(ctx, clientv3.LeaseID(lease))
			if err != nil {
				return false, err
			}
			return resp.TTL > 0, nil
		}})
	// Whatever a killed predecessor left half written (an app without its
	// chart, a delete that never finished) is repaired before anyone reads.
	// Unsigned leftovers (an older release's) count as a predecessor's when
	// no other replica runs; otherwise only once older than any request
	// can run.
	before := start
	if others, err := replicas.Others(ctx); err != nil {
		return fmt.Errorf("orchestrator: list the replicas: %w", err)
	} else if others {
		before = start.Add(-markerLifetime)
	}
	recovered, err := cat.Recover(ctx, before)
	if err != nil {
		return fmt.Errorf("orchestrator: recover the catalogue: %w", err)
	}
	if recovered != (catalog.Recovered{}) {
		a.log.WithFields(logrus.Fields{"intents": recovered.Intents, "unmarked": recovered.Unmarked,
			"orphans": recovered.Orphans, "lifecycles": recovered.Lifecycles}).Warn("repaired the catalogue after an unclean stop")
	}
	// Gets, lists and parent checks read the catalogue's index in etcd,
	// which stays fast however large the catalogue grows (FerretDB reads a
	// whole collection for most queries).
	reconciled, err := cat.UseIndex(ctx, etcd.Client, a.opts.EtcdPrefix)
	if err != nil {
		return fmt.Errorf("orchestrator: index the catalogue: %w", err)
	}
	if reconciled.Fixed > 0 {
		a.log.WithField("entries", reconciled.Fixed).Info("catalogue index brought up to date")
	}
	contexts := appcontext.New(appcontext.Options{Client: etcd.Client, Prefix: a.opts.EtcdPrefix})
	kubeconfigs := cluster.KubeconfigOptions{AllowProxy: a.opts.KubeconfigAllowProxy}
	clusters := cluster.NewRegistry(cluster.Options{KubeconfigOptions: kubeconfigs, MaxResponse: a.opts.ClusterMaxResponse, Kubeconfig: func(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error) {
		if ref.Provider == deploy.V1Provider { // a v1 cloud region
			return catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).GetContent(ctx, catalog.Key{ref.Name})
		}
		return catalog.For[catalog.Empty](cat, catalog.Clusters).GetContent(ctx, catalog.Key{ref.Provider, ref.Name})
	}, CloudKubeconfig: logicalcloud.Source{Catalog: cat}.ForCluster})
	groupWork := &groupHandler{}
	groups := replicas.Kind(kindGroups, groupWork)
	// The cache is created before rsync, which orders dependent apps by
	// what it observes; it runs with the watchers below.
	cache := appcontext.NewCache(contexts, a.log.WithField("component", "cache"))
	// The overview's DIGs, instances and lifecycles, kept in memory from
	// the catalogue's index by the cache's watch.
	mirror := catalog.NewMirror(a.opts.EtcdPrefix)
	cache.Follow(mirror.Prefix(), mirror)
	// Rendered manifests are not kept per context: the most recently used
	// ones are, up to a bound, and the others read from etcd when needed.
	manifests := appcontext.NewManifests(contexts, a.opts.ManifestCacheSize)
	engine, err := rsync.New(rsync.Options{Store: contexts, Clusters: clusters, FieldValidation: a.opts.FieldValidation,
		Manifests: manifests, Observed: cache, Logger: a.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	defer engine.Close() // cancels in-flight work; the group's next owner continues it
	dispatcher, err := rsync.NewDispatcher(rsync.DispatcherOptions{Engine: engine, Claims: groups, Lease: replicas.Lease,
		Logger: a.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	renderMetrics, err := render.NewMetrics(a.opts.Registry)
	if err != nil {
		return err
	}
	renderer := render.NewPool(render.PoolOptions{Workers: a.opts.Render.Workers, Timeout: a.opts.Render.Timeout,
		MemoryLimit: a.opts.Render.MemoryLimit, MaxOutput: a.opts.Render.MaxOutput, MaxRenders: a.opts.Render.MaxRequests,
		Limits: a.opts.Archive, Metrics: renderMetrics, Logger: a.log.WithField("component", "render")})
	defer renderer.Close()
	var deployer *deploy.Service
	issuer, err := logicalcloud.NewIssuer(logicalcloud.IssuerOptions{Clients: clusters, Logger: a.log.WithField("component", "issuer"),
		// Set before any request is issued: requests come from the deployer.
		Store: logicalcloud.CertStoreFunc(func(ctx context.Context, req logicalcloud.Request, cert, failure string) error {
			return deployer.SetCertificate(ctx, req, cert, failure)
		})})
	if err != nil {
		return err
	}
	defer issuer.Close()
	deployer, err = deploy.New(deploy.Options{Catalog: cat, Contexts: contexts, Rsync: dispatcher, Renderer: renderer, Issuer: issuer, CreateWait: a.opts.V1CreateWait, CreateAsync: a.opts.V1CreateAsync,
		RevisionLimit: a.opts.RevisionLimit, Locks: replicas, Logger: a.log.WithField("component", "deploy")})
	if err != nil {
		return err
	}
	clusterWork := &lateHandler{}
	clusterKind := replicas.Kind(kindClusters, clusterWork)
	watchers, err := watcher.New(watcher.Options{Store: contexts, Clusters: clusters, SilentAfter: a.opts.MonitorSilentAfter,
		Claims: clusterKind, Logger: a.log.WithField("component", "watcher")})
	if err != nil {
		return err
	}
	clusterWork.set(watchers.Acquired, watchers.Released)
	reader := &status.Reader{Catalog: cat, Contexts: contexts, Cache: cache, SilentAfter: a.opts.MonitorSilentAfter, Clusters: clusters,
		Mirror: mirror, Manifests: manifests}
	subscriptions := &lateHandler{}
	sinks := &lateHandler{}
	deliveries := a.deliveryCap(soft, maxConns)
	notifier, err := a.notifier(cat, etcd, reader, selfAddrs(etcd, mongo, ln, grpcLn), deliveries, notifyReplicas{
		subscriptions: replicas.Kind(kindSubscriptions, subscriptions), sinks: replicas.Kind(kindSinks, sinks), lease: replicas.Lease})
	if err != nil {
		return err
	}
	subscriptions.set(notifier.AcquiredSubscription, notifier.ReleasedSubscription)
	sinks.set(notifier.AcquiredSink, notifier.ReleasedSink)
	cache.OnChange(notifier.Changed)
	histories := history.NewStore(history.StoreOptions{Client: etcd.Client, Prefix: a.opts.EtcdPrefix, Limit: a.opts.HistoryLimit})
	// A group's history is recorded by the replica that owns the group.
	recorder, err := history.NewRecorder(history.RecorderOptions{Store: histories, Source: reader, Groups: cache.Groups, Owner: groups,
		Registerer: a.opts.Registry, Logger: a.log.WithField("component", "history")})
	if err != nil {
		return err
	}
	cache.OnChange(recorder.Changed)
	// Every group the cache knows needs an owner (the dispatcher wants
	// those with rsync actions as soon as they are requested).
	cache.OnChange(func(gs []string) {
		for _, g := range gs {
			groups.Want(g)
		}
	})
	groupWork.acquire = []func(string){dispatcher.Acquired, func(g string) { recorder.Changed([]string{g}) }, func(g string) {
		if strings.HasPrefix(g, "lc:") {
			if err := deployer.ResumeCloud(ctx, g); err != nil {
				a.log.WithError(err).WithField("group", g).Warn("cannot resume a logical cloud's certificate requests")
			}
		}
	}}
	groupWork.release = []func(string){dispatcher.Released}
	watchCtx, stopWatchers := context.WithCancel(ctx)
	background := map[string]func(context.Context) error{
		"watchers": watchers.Run, "context cache": cache.Run, "notifier": notifier.Run, "history recorder": recorder.Run,
		"rsync dispatcher": dispatcher.Run, "replica set": replicas.Run,
		"group owner": func(ctx context.Context) error {
			gs, err := cache.Groups(ctx)
			for _, g := range gs {
				groups.Want(g)
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	done := map[string]chan error{}
	for name, run := range background {
		ch := make(chan error, 1) // the goroutine never reads the map, which this loop writes
		done[name] = ch
		go func() { ch <- run(watchCtx) }()
	}
	notifyDone := done["notifier"]
	defer func() {
		stopWatchers()
		for name, ch := range done {
			if werr := <-ch; werr != nil && !errors.Is(werr, context.Canceled) {
				a.log.WithError(werr).Errorf("%s stopped", name)
			}
		}
	}()
	// Subscriptions resume before the API serves, so none is missing from
	// it; and the replica registers first, so what the API starts is
	// signed with its lease (a replica whose id another process still
	// holds waits for that lease to go).
	for _, ready := range []<-chan struct{}{notifier.Ready(), replicas.Ready()} {
		select {
		case <-ready:
		case err := <-notifyDone:
			notifyDone <- err // for the deferred wait
			return fmt.Errorf("orchestrator: notifier: %w", err)
		case <-ctx.Done():
			return nil
		}
	}
	apiOpts := api.Options{
		Catalog:       cat,
		Deploy:        deployer,
		Clouds:        deployer,
		Instances:     deployer,
		Status:        reader,
		Subscriptions: notifier,
		History:       histories,
		Overview:      overviews{Reader: reader, replica: a.opts.ReplicaID, clusters: clusterKind},
		Replicas:      replicaView{set: replicas},
		Consistency:   consistency{cli: etcd.Client, cache: cache},
		Changes:       notifier,
		Console:       console.Handler(),
		ClusterInUse: func(ctx context.Context, provider, name string) ([]string, error) {
			return liveOn(ctx, cache, contexts, appcontext.ClusterRef{Provider: provider, Name: name})
		},
		ClusterDeleted: func(provider, name string) {
			ref := appcontext.ClusterRef{Provider: provider, Name: name}
			watchers.Forget(ref)
			clusters.Forget(ref)
		},
		Checks: map[string]api.Check{
			"etcd":  etcd.Ping,
			"mongo": mongo.Ping,
			// A replica waiting for its id (another process holds it) owns
			// no work yet.
			"replica": func(context.Context) error {
				if replicas.Lease() == 0 {
					return fmt.Errorf("replica %s is not registered yet", a.opts.ReplicaID)
				}
				return nil
			},
		},
		ArchiveLimits:          a.opts.Archive,
		Archives:               renderer,
		Logger:                 a.log.WithField("component", "api"),
		Registerer:             a.opts.Registry,
		Gatherer:               a.opts.Registry,
		Kubeconfig:             kubeconfigs,
		MaxJSONDepth:           a.opts.HTTP.MaxJSONDepth,
		ListPageSize:           a.opts.ListPageSize,
		StreamWriteTimeout:     a.opts.HTTP.StreamWriteTimeout,
		MaxStreams:             maxStreams(a.opts.HTTP.MaxStreams, maxConns),
		MaxBodyMemory:          a.opts.HTTP.MaxBodyMemory,
		MaxBodyMemoryPerCaller: a.opts.HTTP.MaxBodyMemoryPerCaller,
		MaxAnswerMemory:        a.opts.HTTP.MaxAnswerMemory,
		AnswerWriteTimeout:     a.opts.HTTP.AnswerWriteTimeout,
		WriteTimeout:           a.opts.HTTP.WriteTimeout,
		MinBodyRate:            a.opts.HTTP.MinBodyRate,
		ReadTimeout:            a.opts.HTTP.ReadTimeout,
	}
	if a.tokens != nil { // never a typed nil in the interface
		apiOpts.Tokens = a.tokens
	}
	handler, err := api.New(apiOpts)
	if err != nil {
		return err
	}

	conns, err := newConnMetrics(a.opts.Registry, maxConns)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: a.opts.HTTP.ReadHeaderTimeout,
		ReadTimeout:       a.opts.HTTP.ReadTimeout,
		WriteTimeout:      a.opts.HTTP.WriteTimeout,
		IdleTimeout:       a.opts.HTTP.IdleTimeout,
		ConnState:         conns.track,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(serverLog{a.log.WithField("component", "http")}, "", 0),
	}
	// Connections beyond the cap wait in the kernel's backlog; running out
	// of descriptors anyway makes Serve back off and retry, never exit.
	limited := netutil.LimitListener(ln, maxConns)
	serveErr := make(chan error, 1)
	serving = true
	if a.cert != nil {
		srv.TLSConfig = a.cert.ServerConfig()
		go func() { serveErr <- srv.ServeTLS(limited, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(limited) }()
	}

	stopGRPC, err := a.serveStatusNotify(grpcLn, maxConns, reader, notifier)
	if err != nil {
		_ = srv.Close()
		return errors.Join(err, ignoreClosed(<-serveErr))
	}
	defer stopGRPC()

	a.mu.Lock()
	a.addr = ln.Addr()
	a.mu.Unlock()
	close(a.ready)
	a.log.WithFields(logrus.Fields{"addr": ln.Addr().String(), "tls": a.cert != nil, "auth": a.tokens != nil,
		"max_connections": maxConns, "max_deliveries": deliveries, "open_files": soft,
		"startup_ms": time.Since(start).Milliseconds()}).Info("orchestrator serving")

	select {
	case err := <-serveErr:
		return fmt.Errorf("orchestrator: serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), a.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running after the drain are cut off.
		_ = srv.Close()
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("orchestrator: serve: %w", err)
	}
	return nil
}

// markerLifetime bounds how long a request may leave a catalogue marker
// (an upload's intent, a delete's mark) in place: well above the longest
// request the HTTP timeouts allow.
const markerLifetime = 10 * time.Minute

// liveOn lists the contexts still live on a cluster, as etcd has them: the
// cache may trail etcd by a moment either way (a v1 client deletes its
// cloud region right after its instance's deletion finished; an instantiate
// may have recorded a context the cache has not seen yet), and a cluster
// must never be deleted from under a live context.
func liveOn(ctx context.Context, cache *appcontext.Cache, contexts *appcontext.Store, ref appcontext.ClusterRef) ([]string, error) {
	ids, err := cache.LiveOn(ctx, ref)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 { // confirm the absence too, with a range read
		list, err := contexts.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sm := range list {
			if sm.Status.Status != appcontext.Terminated {
				ids = append(ids, sm.Meta.ID)
			}
		}
	}
	var live []string
	for _, id := range ids {
		c, err := contexts.Get(ctx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if c.Status.Status == appcontext.Terminated {
			continue
		}
		for _, p := range c.Placements {
			if p.Cluster == ref {
				live = append(live, id)
				break
			}
		}
	}
	return live, nil
}

// notifier builds the subscription manager and, when configured, the AAI
// sink.
// notifyReplicas is how the notifier shares its work with other replicas.
type notifyReplicas struct {
	subscriptions, sinks *ownership.Kind
	lease                func() clientv3.LeaseID
}

func (a *App) notifier(cat *catalog.Catalog, etcd *etcdstore.Store, reader *status.Reader, self []string, deliveries int, shared notifyReplicas) (*notify.Manager, error) {
	deliverer, err := notify.NewDeliverer(notify.DelivererOptions{Allow: a.opts.CallbackAllow, Deny: a.opts.CallbackDeny, Self: self,
		MaxDeliveries: deliveries, MaxDeliveriesPerHost: a.opts.Notify.MaxDeliveriesPerHost})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: callback policy: %w", err)
	}
	metrics, err := notify.NewMetrics(a.opts.Registry)
	if err != nil {
		return nil, err
	}
	prefix := a.opts.EtcdPrefix
	if prefix == "" {
		prefix = "/argus"
	}
	var sink *notify.AAISink
	if a.opts.AAI.URL != "" {
		password := ""
		if a.opts.AAI.PasswordFile != "" {
			data, err := os.ReadFile(a.opts.AAI.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("orchestrator: AAI password: %w", err)
			}
			password = strings.TrimSpace(string(data))
		}
		sink, err = notify.NewAAISink(notify.AAIOptions{URL: a.opts.AAI.URL, Username: a.opts.AAI.Username, Password: password,
			Tenants: a.opts.AAI.Tenants, SelfLink: a.opts.AAI.SelfLink,
			Region: func(ctx context.Context, id string) (string, string, error) {
				inst, err := catalog.For[catalog.InstanceSpec](cat, catalog.Instances).Get(ctx, catalog.Key{id})
				if err != nil {
					return "", "", err
				}
				region := inst.Spec.Request.CloudRegion
				conn, err := catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).Get(ctx, catalog.Key{region})
				if err != nil {
					return "", "", err
				}
				return conn.Spec.CloudOwner, region, nil
			}})
		if err != nil {
			return nil, err
		}
	}
	return notify.NewManager(notify.ManagerOptions{Catalog: cat, States: notify.NewStates(etcd.Client, prefix+"/notify/"),
		Deliverer: deliverer, Feeds: reader, CheckQuery: status.CheckQuery, AAI: sink, Metrics: metrics,
		Subscriptions: shared.subscriptions, Sinks: shared.sinks, Prefix: prefix, Lease: shared.lease,
		MaxSubscriptions: a.opts.Notify.MaxSubscriptions, MaxPerSubject: a.opts.Notify.MaxSubscriptionsPerSubject,
		BackoffBase: a.opts.NotifyBackoffBase, Logger: a.log.WithField("component", "notify")})
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

// overviews answers the console's overview queries; a cluster's watcher
// runs on the replica holding the cluster's claim.
type overviews struct {
	*status.Reader
	replica  string
	clusters *ownership.Kind
}

func (o overviews) ClusterOverview(ctx context.Context) (status.ClusterOverview, error) {
	return o.Reader.ClusterOverview(ctx, o.replica, o)
}

func (o overviews) WatcherOwner(ref appcontext.ClusterRef) string {
	return o.clusters.Holder(ref.String())
}

var _ api.OverviewReader = overviews{}

// serverLog carries net/http's own messages into the structured log. TLS
// handshake failures are what port scanners and plain-HTTP clients cause,
// so they are debug noise; anything else is worth a warning.
type serverLog struct{ e *logrus.Entry }

func (l serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		l.e.Debug(msg)
	} else {
		l.e.Warn(msg)
	}
	return len(p), nil
}

// openStores opens etcd and MongoDB concurrently: embedded, each takes a
// noticeable part of the start-up time.
func (a *App) openStores(ctx context.Context) (*etcdstore.Store, *mongostore.Store, error) {
	var (
		wg       sync.WaitGroup
		etcd     *etcdstore.Store
		mongo    *mongostore.Store
		etcdErr  error
		mongoErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		etcd, etcdErr = etcdstore.Open(ctx, etcdstore.Options{
			Endpoints: a.opts.EtcdEndpoints,
			DataDir:   a.opts.DataDir,
			Logger:    a.log.WithField("component", "etcd"),
		})
	}()
	go func() {
		defer wg.Done()
		mongo, mongoErr = mongostore.Open(ctx, mongostore.Options{
			URI:      a.opts.MongoURI,
			Database: a.opts.MongoDatabase,
			DataDir:  a.opts.DataDir,
			Logger:   a.log.WithField("component", "mongo"),
		})
	}()
	wg.Wait()
	if etcdErr != nil || mongoErr != nil {
		// Best effort: the open error is the one worth reporting.
		if etcd != nil {
			_ = etcd.Close()
		}
		if mongo != nil {
			_ = mongo.Close(context.Background())
		}
		return nil, nil, errors.Join(etcdErr, mongoErr)
	}
	return etcd, mongo, nil
}

// selfAddrs lists the addresses that reach this process: the API (and the
// gRPC status notifications) and the
// embedded stores. Callbacks never go there.
func selfAddrs(etcd *etcdstore.Store, mongo *mongostore.Store, listeners ...net.Listener) []string {
	var listen []string
	for _, ln := range listeners {
		if ln != nil {
			listen = append(listen, ln.Addr().String())
		}
	}
	for _, u := range append(append(etcd.Endpoints(), etcd.PeerEndpoints()...), mongo.EmbeddedURI()) {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			listen = append(listen, p.Host)
		}
	}
	return notify.SelfAddrs(listen...)
}

// connMetrics count the API's open connections against the cap.
type connMetrics struct{ open prometheus.Gauge }

func newConnMetrics(reg prometheus.Registerer, limit int) (*connMetrics, error) {
	m := &connMetrics{open: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "http", Name: "open_connections",
		Help: "API client connections open now."})}
	capacity := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "http", Name: "max_connections",
		Help: "The cap on API client connections; more wait in the listen backlog."})
	capacity.Set(float64(limit))
	for _, c := range []prometheus.Collector{m.open, capacity} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("orchestrator: register connection metrics: %w", err)
		}
	}
	return m, nil
}

func (m *connMetrics) track(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		m.open.Inc()
	case http.StateClosed, http.StateHijacked:
		m.open.Dec()
	}
}

// ignoreClosed drops the error Serve returns after Close.
func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// maxStreams is the watch stream cap: as asked, else half the connection
// cap (at least one), leaving the other half to ordinary requests.
func maxStreams(asked, maxConns int) int {
	if asked > 0 {
		return asked
	}
	return max(1, maxConns/2)
}
