package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
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
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/reload"
	"github.com/argus-mc/argus/src/internal/render"
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
	// ShutdownTimeout bounds the graceful drain of HTTP requests; 0 means 4s,
	// which keeps the whole exit under 5 s.
	ShutdownTimeout time.Duration
	// CallbackAllow restricts subscription callbacks to these host names
	// and CIDRs; empty allows every address.
	CallbackAllow []string
	// AAI configures the optional AAI inventory sink; off without a URL.
	AAI AAIOptions
	// NotifyBackoffBase scales notification retry backoff (tests); 0 is
	// the documented 1 s base capped at 60 s.
	NotifyBackoffBase time.Duration
	// AuthTokenFile names the API bearer token file (one token a line, '#'
	// comments); "" leaves the API open. /healthz and /readyz are always open.
	AuthTokenFile string
	// TLSCertFile and TLSKeyFile, both or neither, make the API serve HTTPS
	// (TLS 1.2 or later); "" serves plain HTTP.
	TLSCertFile, TLSKeyFile string
	// FileCheckInterval is how often the token and certificate files are
	// checked for changes while in use; 0 means 2s.
	FileCheckInterval time.Duration
	// Archive bounds every chart and profile archive accepted; zero fields
	// are the archive package's defaults.
	Archive archive.Limits
	// Render bounds Helm rendering, which runs in a pool of child processes
	// of this binary; zero fields are the render package's defaults.
	Render RenderOptions
	// Logger; nil discards.
	Logger *logrus.Logger
	// Registry for metrics; nil means a fresh one with Go and process collectors.
	Registry *prometheus.Registry
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

	mu   sync.Mutex
	addr net.Addr
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

	cat, err := catalog.New(ctx, mongo.DB, catalog.AllKinds()...)
	if err != nil {
		return err
	}
	// Whatever a killed predecessor left half written (an app without its
	// chart, a delete that never finished) is repaired before anyone reads.
	recovered, err := cat.Recover(ctx, start)
	if err != nil {
		return fmt.Errorf("orchestrator: recover the catalogue: %w", err)
	}
	if recovered != (catalog.Recovered{}) {
		a.log.WithFields(logrus.Fields{"intents": recovered.Intents, "unmarked": recovered.Unmarked,
			"orphans": recovered.Orphans, "lifecycles": recovered.Lifecycles}).Warn("repaired the catalogue after an unclean stop")
	}
	contexts := appcontext.New(appcontext.Options{Client: etcd.Client, Prefix: a.opts.EtcdPrefix})
	clusters := cluster.NewRegistry(cluster.Options{Kubeconfig: func(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error) {
		if ref.Provider == deploy.V1Provider { // a v1 cloud region
			return catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).GetContent(ctx, catalog.Key{ref.Name})
		}
		return catalog.For[catalog.Empty](cat, catalog.Clusters).GetContent(ctx, catalog.Key{ref.Provider, ref.Name})
	}})
	engine, err := rsync.New(rsync.Options{Store: contexts, Clusters: clusters, Logger: a.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	defer engine.Close() // cancels in-flight work; Resume continues it next start
	renderMetrics, err := render.NewMetrics(a.opts.Registry)
	if err != nil {
		return err
	}
	renderer := render.NewPool(render.PoolOptions{Workers: a.opts.Render.Workers, Timeout: a.opts.Render.Timeout,
		MemoryLimit: a.opts.Render.MemoryLimit, MaxOutput: a.opts.Render.MaxOutput, MaxRenders: a.opts.Render.MaxRequests,
		Limits: a.opts.Archive, Metrics: renderMetrics, Logger: a.log.WithField("component", "render")})
	defer renderer.Close()
	deployer, err := deploy.New(deploy.Options{Catalog: cat, Contexts: contexts, Rsync: engine, Renderer: renderer,
		Logger: a.log.WithField("component", "deploy")})
	if err != nil {
		return err
	}
	if err := engine.Resume(ctx); err != nil {
		return fmt.Errorf("orchestrator: resume rsync: %w", err)
	}
	watchers, err := watcher.New(watcher.Options{Store: contexts, Clusters: clusters, SilentAfter: a.opts.MonitorSilentAfter,
		Logger: a.log.WithField("component", "watcher")})
	if err != nil {
		return err
	}
	cache := appcontext.NewCache(contexts, a.log.WithField("component", "cache"))
	reader := &status.Reader{Catalog: cat, Contexts: contexts, Cache: cache, SilentAfter: a.opts.MonitorSilentAfter}
	notifier, err := a.notifier(cat, etcd, reader)
	if err != nil {
		return err
	}
	cache.OnChange(notifier.Changed)
	watchCtx, stopWatchers := context.WithCancel(ctx)
	watchDone, cacheDone, notifyDone := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { watchDone <- watchers.Run(watchCtx) }()
	go func() { cacheDone <- cache.Run(watchCtx) }()
	go func() { notifyDone <- notifier.Run(watchCtx) }()
	defer func() {
		stopWatchers()
		for name, done := range map[string]chan error{"watchers": watchDone, "context cache": cacheDone, "notifier": notifyDone} {
			if werr := <-done; werr != nil && !errors.Is(werr, context.Canceled) {
				a.log.WithError(werr).Errorf("%s stopped", name)
			}
		}
	}()
	// Subscriptions resume before the API serves, so none is missing from it.
	select {
	case <-notifier.Ready():
	case err := <-notifyDone:
		notifyDone <- err // for the deferred wait
		return fmt.Errorf("orchestrator: notifier: %w", err)
	case <-ctx.Done():
		return nil
	}
	apiOpts := api.Options{
		Catalog:       cat,
		Deploy:        deployer,
		Instances:     deployer,
		Status:        reader,
		Subscriptions: notifier,
		ClusterInUse: func(ctx context.Context, provider, name string) ([]string, error) {
			return liveOn(ctx, contexts, cache, appcontext.ClusterRef{Provider: provider, Name: name})
		},
		ClusterDeleted: func(provider, name string) {
			ref := appcontext.ClusterRef{Provider: provider, Name: name}
			watchers.Forget(ref)
			clusters.Forget(ref)
		},
		Checks: map[string]api.Check{
			"etcd":  etcd.Ping,
			"mongo": mongo.Ping,
		},
		ArchiveLimits: a.opts.Archive,
		Archives:      renderer,
		Logger:        a.log.WithField("component", "api"),
		Registerer:    a.opts.Registry,
		Gatherer:      a.opts.Registry,
	}
	if a.tokens != nil { // never a typed nil in the interface
		apiOpts.Tokens = a.tokens
	}
	handler, err := api.New(apiOpts)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", a.opts.Listen)
	if err != nil {
		return fmt.Errorf("orchestrator: listen on %s: %w", a.opts.Listen, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(serverLog{a.log.WithField("component", "http")}, "", 0),
	}
	serveErr := make(chan error, 1)
	if a.cert != nil {
		srv.TLSConfig = a.cert.ServerConfig()
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}

	a.mu.Lock()
	a.addr = ln.Addr()
	a.mu.Unlock()
	close(a.ready)
	a.log.WithFields(logrus.Fields{"addr": ln.Addr().String(), "tls": a.cert != nil, "auth": a.tokens != nil,
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

// liveOn lists the contexts not yet Terminated that place anything on the
// cluster. The cache answers at once when it knows one; otherwise etcd is
// read, as the cache may not have seen a context created a moment ago and
// a cluster must never be deleted from under one.
func liveOn(ctx context.Context, store *appcontext.Store, cache *appcontext.Cache, ref appcontext.ClusterRef) ([]string, error) {
	if ids, err := cache.LiveOn(ctx, ref); err != nil || len(ids) > 0 {
		return ids, err
	}
	list, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, sm := range list {
		if sm.Status.Status == appcontext.Terminated {
			continue
		}
		c, err := store.Get(ctx, sm.Meta.ID)
		if err != nil {
			return nil, err
		}
		for _, p := range c.Placements {
			if p.Cluster == ref {
				ids = append(ids, sm.Meta.ID)
				break
			}
		}
	}
	return ids, nil
}

// notifier builds the subscription manager and, when configured, the AAI
// sink.
func (a *App) notifier(cat *catalog.Catalog, etcd *etcdstore.Store, reader *status.Reader) (*notify.Manager, error) {
	deliverer, err := notify.NewDeliverer(notify.DelivererOptions{Allow: a.opts.CallbackAllow})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: callback allow-list: %w", err)
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
		BackoffBase: a.opts.NotifyBackoffBase, Logger: a.log.WithField("component", "notify")})
}

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
