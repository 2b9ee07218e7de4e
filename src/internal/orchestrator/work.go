package orchestrator

import (
	"context"

	"github.com/argus-mc/argus/src/internal/aai"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/heal"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/ownership"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/rsync"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/watcher"
)

// work is what the work phase builds: every part that does the
// orchestrator's work, wired to the stores and to each other, with their
// background runs added to the lifecycle in a fixed order.
type work struct {
	kinds       kinds
	contexts    *appcontext.Store
	cache       *appcontext.Cache
	mirror      *catalog.Mirror       // the overview's, fed by the cache
	manifests   *appcontext.Manifests // the rendered manifests in use
	kubeconfigs cluster.KubeconfigOptions
	clusters    *cluster.Registry
	dispatcher  *rsync.Dispatcher
	renderer    *render.Pool
	clouds      *logicalcloud.Service
	deployer    *deploy.Service
	healer      *heal.Controller
	watchers    *watcher.Manager
	reader      *status.Reader
	notifier    *notify.Manager
	notifierRun *part     // its run, whose early end fails the start-up
	sink        *aai.Sink // nil without AAI
	histories   *history.Store
	recorder    *history.Recorder
	fleet       *fleet
}

// kinds are the kinds of owned work (see replicas.go). Each is made before
// the parts that need it, which then attach themselves as its handlers;
// the replica set refuses to run a kind left without one.
type kinds struct {
	clusters, groups, subscriptions *ownership.Kind
	sinks                           *ownership.Kind // nil without AAI
}

// buildWork is the work phase. Parts are added to the lifecycle as they
// are built, so their runs start in this order (what a part depends on
// first, the replica set, which hands them work, last) and stop in
// reverse.
func (a *App) buildWork(ctx context.Context, life *lifecycle, st *stores, ls *listeners) (*work, error) {
	w := &work{kubeconfigs: cluster.KubeconfigOptions{AllowProxy: a.opts.KubeconfigAllowProxy}}
	w.kinds = kinds{clusters: st.replicas.Kind(kindClusters, nil), groups: st.replicas.Kind(kindGroups, nil),
		subscriptions: st.replicas.Kind(kindSubscriptions, nil)}
	if a.opts.AAI.URL != "" {
		w.kinds.sinks = st.replicas.Kind(kindSinks, nil)
	}
	w.contexts = appcontext.New(appcontext.Options{Client: st.etcd.Client, Prefix: a.opts.EtcdPrefix})
	w.clusters = cluster.NewRegistry(cluster.Options{KubeconfigOptions: w.kubeconfigs, MaxResponse: a.opts.ClusterMaxResponse,
		Kubeconfig: kubeconfigOf(st.catalog), CloudKubeconfig: logicalcloud.Source{Catalog: st.catalog}.ForCluster})
	// The cache is created before rsync, which orders dependent apps by
	// what it observes.
	w.cache = appcontext.NewCache(w.contexts, a.log.WithField("component", "cache"))
	// The overview's DIGs, instances and lifecycles, kept in memory from
	// the catalogue's index by the cache's watch.
	w.mirror = catalog.NewMirror(a.opts.EtcdPrefix)
	w.cache.Follow(w.mirror.Prefix(), w.mirror)
	// Rendered manifests are not kept per context: the most recently used
	// ones are, up to a bound, and the others read from etcd when needed.
	w.manifests = appcontext.NewManifests(w.contexts, a.opts.ManifestCacheSize)
	// The status reader answers queries from the cache; the deployer and
	// self-heal also read drift through it.
	w.reader = &status.Reader{Catalog: st.catalog, Contexts: w.contexts, Cache: w.cache, SilentAfter: a.opts.MonitorSilentAfter,
		Clusters: w.clusters, Mirror: w.mirror, Manifests: w.manifests}
	if err := a.buildFleet(ctx, life, st, w); err != nil {
		return nil, err
	}
	if err := a.buildDeploy(life, st, w); err != nil {
		return nil, err
	}
	if err := a.buildWatchers(st, w); err != nil {
		return nil, err
	}
	if err := a.buildNotifications(st, ls, w); err != nil {
		return nil, err
	}
	if err := a.buildHistory(st, w); err != nil {
		return nil, err
	}
	a.repairLifecycles(ctx, st, w)
	a.runWork(life, st, w)
	return w, nil
}

// kubeconfigOf reads a cluster's kubeconfig from the catalogue: a v2
// cluster's, or a v1 cloud region's connectivity info.
func kubeconfigOf(cat *catalog.Catalog) func(context.Context, appcontext.ClusterRef) ([]byte, error) {
	return func(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error) {
		if ref.Provider == deploy.V1Provider {
			return catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).GetContent(ctx, catalog.Key{ref.Name})
		}
		return catalog.For[catalog.Empty](cat, catalog.Clusters).GetContent(ctx, catalog.Key{ref.Provider, ref.Name})
	}
}

// buildDeploy builds rsync (the engine and the dispatcher that hands it
// each group's actions on the group's owner), the render pool, the
// logical clouds and the deployer.
func (a *App) buildDeploy(life *lifecycle, st *stores, w *work) error {
	engine, err := rsync.New(rsync.Options{Store: w.contexts, Clusters: w.clusters, FieldValidation: a.opts.FieldValidation,
		Manifests: w.manifests, Observed: w.cache, Delegate: w.fleet.hub, Logger: a.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	// Closing cancels in-flight work; the group's next owner continues it.
	life.onStop("rsync engine", func() error { engine.Close(); return nil })
	w.dispatcher, err = rsync.NewDispatcher(rsync.DispatcherOptions{Engine: engine, Claims: w.kinds.groups, Lease: st.replicas.Lease,
		Logger: a.log.WithField("component", "rsync")})
	if err != nil {
		return err
	}
	w.kinds.groups.Handle(w.dispatcher)
	renderMetrics, err := render.NewMetrics(a.opts.Registry)
	if err != nil {
		return err
	}
	w.renderer = render.NewPool(render.PoolOptions{Workers: a.opts.Render.Workers, Timeout: a.opts.Render.Timeout,
		MemoryLimit: a.opts.Render.MemoryLimit, MaxOutput: a.opts.Render.MaxOutput, MaxRenders: a.opts.Render.MaxRequests,
		Limits: a.opts.Archive, Metrics: renderMetrics, Logger: a.log.WithField("component", "render")})
	life.onStop("render pool", func() error { w.renderer.Close(); return nil })
	if err := a.buildClouds(st, w); err != nil {
		return err
	}
	w.deployer, err = deploy.New(deploy.Options{Catalog: st.catalog, Contexts: w.contexts, Rsync: w.dispatcher, Renderer: w.renderer,
		CreateWait: a.opts.V1CreateWait, CreateAsync: a.opts.V1CreateAsync, RevisionLimit: a.opts.RevisionLimit, Locks: st.replicas,
		Drift: w.reader, Logger: a.log.WithField("component", "deploy")})
	if err != nil {
		return err
	}
	// Self-heal runs where the group's rsync actions do: on its owner.
	w.healer, err = heal.New(heal.Options{Contexts: w.cache, Drift: w.reader, Healer: w.deployer, Owner: w.kinds.groups,
		Delay: a.opts.SelfHealDelay, Logger: a.log.WithField("component", "self-heal")})
	if err != nil {
		return err
	}
	w.cache.OnChange(w.healer.Changed)
	w.kinds.groups.Handle(ownership.HandlerFuncs{Acquire: w.healer.Acquired})
	return nil
}

// buildClouds builds the logical clouds. A standard cloud's certificates
// are issued and renewed by its Keeper on the cloud's owner alone, which
// learns of the cloud's changes from the cache and stops with the cloud's
// terminate or hand-over (its Released runs before the claim goes).
func (a *App) buildClouds(st *stores, w *work) error {
	lc := a.opts.LogicalClouds
	var err error
	w.clouds, err = logicalcloud.NewService(logicalcloud.ServiceOptions{Catalog: st.catalog, Contexts: w.contexts,
		Rsync: w.dispatcher, Clients: w.clusters, Owns: w.kinds.groups.Owns, CertTTL: lc.CertTTL, ReservedUsers: lc.ReservedUsers,
		Issuer: logicalcloud.IssuerOptions{Timeout: lc.IssueTimeout, RenewAfter: lc.renewAfter()},
		Logger: a.log.WithField("component", "logicalcloud")})
	if err != nil {
		return err
	}
	if keeper := w.clouds.Keeper(); keeper != nil {
		w.cache.OnChange(keeper.Changed)
		w.kinds.groups.Handle(keeper)
	}
	return nil
}

// repairLifecycles gives an instantiate killed between its lifecycle write
// and its context write (a DIG or logical cloud Instantiated with nothing
// behind it) a failed context saying so; read-only etcd leaves that to the
// next start.
func (a *App) repairLifecycles(ctx context.Context, st *stores, w *work) {
	if n, err := w.deployer.RepairLifecycles(ctx, st.repairBefore); err != nil {
		a.log.WithError(err).Warn("cannot repair the lifecycles an unclean stop left")
	} else if n > 0 {
		a.log.WithField("lifecycles", n).Warn("repaired lifecycles whose context an unclean stop lost")
	}
}

// buildWatchers builds the cluster watchers (on the replica holding each
// cluster's claim).
func (a *App) buildWatchers(st *stores, w *work) error {
	var err error
	w.watchers, err = watcher.New(watcher.Options{Store: w.contexts, Clusters: w.clusters, Remote: w.fleet.join, SilentAfter: a.opts.MonitorSilentAfter,
		Claims: w.kinds.clusters, Logger: a.log.WithField("component", "watcher")})
	if err != nil {
		return err
	}
	w.kinds.clusters.Handle(w.watchers)
	return nil
}

// buildHistory builds the history store and its recorder: a group's
// history is recorded by the replica that owns the group.
func (a *App) buildHistory(st *stores, w *work) error {
	w.histories = history.NewStore(history.StoreOptions{Client: st.etcd.Client, Prefix: a.opts.EtcdPrefix, Limit: a.opts.HistoryLimit})
	var err error
	w.recorder, err = history.NewRecorder(history.RecorderOptions{Store: w.histories, Source: w.reader, Groups: w.cache.Groups,
		Owner: w.kinds.groups, Registerer: a.opts.Registry, Logger: a.log.WithField("component", "history")})
	if err != nil {
		return err
	}
	w.cache.OnScopedChange(w.recorder.ChangedScoped)
	w.kinds.groups.Handle(ownership.HandlerFuncs{Acquire: func(g string) { w.recorder.Changed([]string{g}) }})
	return nil
}

// runWork adds the background runs in their fixed order. Every group the
// cache knows needs an owner (the dispatcher wants those with rsync
// actions as soon as they are requested).
func (a *App) runWork(life *lifecycle, st *stores, w *work) {
	w.cache.OnChange(func(gs []string) {
		for _, g := range gs {
			w.kinds.groups.Want(g)
		}
	})
	life.add("context cache", w.cache.Run, nil)
	life.add("catalogue repairs", func(ctx context.Context) error {
		return st.catalog.RunRepairs(ctx, catalog.RepairOptions{Logger: a.log.WithField("component", "catalog")})
	}, nil)
	life.add("watchers", w.watchers.Run, nil)
	w.notifierRun = life.add("notifier", w.notifier.Run, nil)
	if w.sink != nil {
		life.add("AAI sink", w.sink.Run, nil)
	}
	life.add("history recorder", w.recorder.Run, nil)
	life.add("rsync dispatcher", w.dispatcher.Run, nil)
	life.add("self-heal", w.healer.Run, nil)
	if keeper := w.clouds.Keeper(); keeper != nil {
		life.add("logical clouds", keeper.Run, nil)
	}
	life.add("group owner", func(ctx context.Context) error {
		gs, err := w.cache.Groups(ctx)
		for _, g := range gs {
			w.kinds.groups.Want(g)
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}, nil)
	life.add("replica set", st.replicas.Run, nil)
}
