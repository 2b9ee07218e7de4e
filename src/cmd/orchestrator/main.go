// Command orchestrator serves Argus's REST API and runs its deploy, watch,
// status and notification machinery. See docs/operations.md for its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/config"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/fleet/hub"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/rlimit"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// idleRenderWorker is about what a warm render worker holds while idle
// (the binary loaded, Helm's packages initialised).
const idleRenderWorker = 64 << 20

// renderReserve is what the render workers may use of the container
// beside the orchestrator: each its start-up size, and one rendering its
// whole --render-memory over that.
func renderReserve(ro orchestrator.RenderOptions) uint64 {
	workers := ro.Workers
	if workers <= 0 {
		workers = render.DefaultWorkers
	}
	memory := ro.MemoryLimit
	if memory <= 0 {
		memory = render.DefaultMemoryLimit
	}
	return uint64(memory) + uint64(workers)*idleRenderWorker
}

// settings are the flags; everything else about the app lives in Options.
type settings struct {
	opts      orchestrator.Options
	endpoints config.StringList
	allow     config.StringList
	deny      config.StringList
	tenants   config.StringList
	reserved  config.StringList
	logFormat string
	logLevel  string
	config    string
	memRatio  float64
}

// Flags defines the orchestrator's flags on a new flag set; the tests render
// the documented configuration reference from it.
func Flags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
	fs.StringVar(&s.config, config.ConfigFlag, "", "YAML file with flag values, keyed by flag name")
	fs.StringVar(&s.opts.Listen, "listen", ":9015", "address the REST API listens on")
	fs.StringVar(&s.opts.DebugListen, "debug-listen", "", "loopback address the Go runtime's profiles (/debug/pprof/, without the command line) are served on, without authentication (any other address is refused); empty turns them off")
	fs.StringVar(&s.opts.GRPCListen, "grpc-listen", "", "address the gRPC status notification service (EMCO's StatusNotify, for emcoctl watch) listens on, with the API's TLS and tokens; EMCO's clients expect :9016; empty turns it off")
	fs.StringVar(&s.opts.DataDir, "data-dir", "argus-data", "directory for the embedded stores' data")
	fs.Var(&s.endpoints, "etcd-endpoints", "comma-separated etcd client URLs; empty starts an embedded etcd under --data-dir")
	fs.StringVar(&s.opts.MongoURI, "mongo-uri", "", "MongoDB connection URI; empty starts an embedded FerretDB under --data-dir")
	fs.StringVar(&s.opts.MongoDatabase, "mongo-database", "argus", "MongoDB database name")
	fs.StringVar(&s.opts.EtcdPrefix, "etcd-prefix", etcdstore.DefaultPrefix, "prefix of every etcd key Argus writes")
	fs.DurationVar(&s.opts.LogicalClouds.CertTTL, "logical-cloud-cert-ttl", logicalcloud.DefaultCertTTL, "lifetime asked for a standard logical cloud's user certificate (the CSR's expirationSeconds; at least 10m, clusters may cap it); the cloud's owner renews it two thirds into its life, and terminate stops that")
	fs.DurationVar(&s.opts.LogicalClouds.IssueTimeout, "logical-cloud-issue-timeout", 5*time.Minute, "how long a cluster may take to issue a standard logical cloud's first user certificate before the cloud fails (is the cluster's kube-apiserver-client signer configured?)")
	fs.Var(&s.reserved, "logical-cloud-reserved-users", "comma-separated user name prefixes no standard logical cloud may use (400), beside Kubernetes' own system:, which is always refused: the clusters' admin names, an authenticator's prefix such as oidc:")
	s.opts.Etcd.QuotaBytes = etcdstore.DefaultQuotaBytes
	fs.Var(config.Size{Value: &s.opts.Etcd.QuotaBytes}, "etcd-quota-bytes", "backend quota of the embedded etcd: past it etcd raises its NOSPACE alarm and refuses writes (the API then serves reads only and /readyz says why); with --etcd-endpoints, the external etcd's quota, which sizes --catalog-max-bytes")
	fs.DurationVar(&s.opts.Etcd.CompactionRetention, "etcd-compaction-retention", etcdstore.DefaultCompactionRetention, "history the embedded etcd keeps: it compacts every period to the revision of one period ago")
	fs.DurationVar(&s.opts.Etcd.MaintainInterval, "etcd-maintain-interval", etcdstore.DefaultMaintainInterval, "how often the orchestrator looks at etcd: it compacts all history past half the quota, defragments a file more than twice its data, and disarms the NOSPACE alarm once there is room (embedded etcd only; an external one is only reported)")
	s.opts.CatalogLimits = catalog.Limits{MaxObjectBytes: catalog.DefaultMaxObjectBytes, MaxProjectBytes: catalog.DefaultMaxProjectBytes}
	fs.Var(config.Size{Value: &s.opts.CatalogLimits.MaxObjectBytes}, "catalog-max-object-bytes", "largest document one catalogue object may store (metadata with its description, and spec: labels, intents, kv-pairs, override values …); larger is refused with 413; uploaded files are bounded by the archive and body limits")
	fs.Var(config.Size{Value: &s.opts.CatalogLimits.MaxProjectBytes}, "catalog-max-project-bytes", "most one project may store, its objects' documents and uploaded files together (the objects outside projects share one such allowance); a write past it is refused with 413")
	fs.Var(config.Size{Value: &s.opts.CatalogLimits.MaxTotalBytes}, "catalog-max-bytes", "most the whole catalogue's documents may hold (they are copied into etcd); a write past it is refused with 413; 0 is a quarter of --etcd-quota-bytes")
	fs.StringVar(&s.opts.AuthTokenFile, "auth-token-file", "", "file of API bearer tokens, one a line ('#' comments); re-read when it changes; empty leaves the API open (/healthz, /readyz and /v1/healthcheck are always open)")
	fs.StringVar(&s.opts.AuthReadTokenFile, "auth-read-token-file", "", "file of API bearer tokens that may only read (GET and HEAD: status, watch streams, lists, history; anything else is 403), same format as --auth-token-file; the web console hides its actions for them")
	fs.StringVar(&s.opts.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) for HTTPS, with --tls-key-file; re-read when it changes; empty serves plain HTTP")
	fs.StringVar(&s.opts.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.DurationVar(&s.opts.ShutdownTimeout, "shutdown-timeout", 4*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.DurationVar(&s.opts.V1CreateWait, "v1-create-wait", deploy.DefaultCreateWait, "how long POST /v1/instance waits for the first apply to finish before it answers, as k8splugin answers once the resources are created (a create whose apply failed is reverted and answered 500); a longer apply is answered 201 and goes on")
	fs.BoolVar(&s.opts.V1CreateAsync, "v1-create-async", false, "answer POST /v1/instance as soon as the instance is recorded, without waiting for the apply nor reverting a failed one (SPEC section 7)")
	fs.Var(&s.allow, "callback-allow", "comma-separated host names (a.example, *.example), addresses and CIDRs subscription callbacks may reach although refused by default (loopback, link-local, unspecified, broadcast, multicast, cloud metadata) or by a shorter --callback-deny prefix; a named host is trusted wherever it resolves")
	fs.Var(&s.deny, "callback-deny", "comma-separated host names, addresses and CIDRs subscription callbacks may never reach (e.g. 0.0.0.0/0,::/0 with --callback-allow to allow only the listed receivers); the longest matching prefix of the two lists wins, deny wins a tie")
	fs.BoolVar(&s.opts.KubeconfigAllowProxy, "kubeconfig-allow-proxy", false, "accept proxy-url in uploaded and stored cluster kubeconfigs (refused by default: a proxy hides where requests go)")
	s.opts.ClusterMaxResponse = cluster.DefaultMaxResponse
	fs.Var(config.Size{Value: &s.opts.ClusterMaxResponse}, "cluster-max-response", "largest answer read from a cluster's API server (a list, discovery, OpenAPI); larger fails that request (a watch event is bounded at 16Mi)")
	fs.IntVar(&s.opts.HTTP.MaxConnections, "max-connections", 0, "cap on concurrent API client connections, more wait in the listen backlog; 0 picks min(4096, a quarter of the open-file limit); lowered if it would leave fewer than 256 descriptors")
	fs.DurationVar(&s.opts.HTTP.ReadHeaderTimeout, "read-header-timeout", 10*time.Second, "how long a client may take to send a request's headers")
	fs.DurationVar(&s.opts.HTTP.ReadTimeout, "read-timeout", time.Minute, "how long a client may take to send a whole request, body included (408 beyond)")
	fs.DurationVar(&s.opts.HTTP.WriteTimeout, "write-timeout", 2*time.Minute, "how long a request may take from its headers to the end of the answer; watch streams are exempt")
	fs.DurationVar(&s.opts.HTTP.IdleTimeout, "idle-timeout", 2*time.Minute, "how long an idle kept-alive connection stays open")
	s.opts.HTTP.MaxBodyMemory = api.DefaultMaxBodyMemory
	fs.Var(config.Size{Value: &s.opts.HTTP.MaxBodyMemory}, "max-body-memory", "request body bytes all requests together may hold while they are read and checked (each reserves its Content-Length, or its limit); a body that does not fit waits up to 10s, then gets 503 with Retry-After")
	fs.Var(config.Size{Value: &s.opts.HTTP.MaxBodyMemoryPerCaller}, "max-body-memory-per-caller", "most of --max-body-memory one caller (a bearer token, or a remote address) may hold, unless it holds nothing; 0 is a quarter of it. An eighth of --max-body-memory is kept for bodies up to 1Mi, so small requests pass beside large ones")
	s.opts.HTTP.MinBodyRate = api.DefaultMinBodyRate
	fs.Var(config.Size{Value: &s.opts.HTTP.MinBodyRate}, "min-body-rate", "slowest a request body may arrive, in bytes a second on average once 10s have passed; slower is cut with 408, so a trickled upload cannot hold its part of --max-body-memory for the whole --read-timeout; 0 turns it off")
	s.opts.HTTP.MaxAnswerMemory = api.DefaultMaxAnswerMemory
	fs.Var(config.Size{Value: &s.opts.HTTP.MaxAnswerMemory}, "max-answer-memory", "answer bytes all requests together may hold while clients read them (an answer marshalled whole, or the buffer of a status answer, which is written as it is encoded); an answer that does not fit waits up to 10s, then the request gets 503 (or its connection is cut, once the answer began); one larger than this is refused with 413 naming how to narrow it")
	fs.DurationVar(&s.opts.HTTP.AnswerWriteTimeout, "answer-write-timeout", api.DefaultAnswerWriteTimeout, "how long one write of an answer (at most 64Ki) may block before the connection is cut: a client that stopped reading loses its answer and gives its memory back; --write-timeout still bounds the whole answer")
	fs.IntVar(&s.opts.Notify.MaxSubscriptions, "max-subscriptions", notify.DefaultMaxSubscriptions, "most status subscriptions there may be, in all (409 beyond)")
	fs.IntVar(&s.opts.Notify.MaxSubscriptionsPerSubject, "max-subscriptions-per-subject", notify.DefaultMaxPerSubject, "most status subscriptions one deployment intent group or instance may have (409 beyond)")
	fs.IntVar(&s.opts.Notify.MaxDeliveries, "max-deliveries", 0, "cap on callback deliveries in flight (each holds a connection, a file descriptor), more wait their turn; 0 is a quarter of the descriptors the API and gRPC connection caps leave (at most 1024); a value over half of them is lowered")
	fs.IntVar(&s.opts.Notify.MaxDeliveriesPerHost, "max-deliveries-per-host", 0, "cap on callback deliveries in flight to one receiver host, so one that does not answer cannot hold every slot; 0 is a quarter of --max-deliveries")
	s.opts.ManifestCacheSize = appcontext.DefaultManifestCacheSize
	fs.Var(config.Size{Value: &s.opts.ManifestCacheSize}, "manifest-cache-size", "rendered manifests kept in memory, the most recently used (rsync applying them, status answers with output=detail); the others are read from etcd when needed")
	fs.IntVar(&s.opts.HTTP.MaxStreams, "max-watch-streams", 0, "cap on ?watch=true streams open at once (status and overview), more get 503 with Retry-After; 0 is half of the connection cap, so streams never hold every connection")
	fs.DurationVar(&s.opts.HTTP.StreamWriteTimeout, "watch-write-timeout", 30*time.Second, "how long one write of a ?watch=true stream may block before the stream is closed (a client that stopped reading)")
	fs.IntVar(&s.opts.HTTP.MaxJSONDepth, "max-json-depth", api.DefaultMaxJSONDepth, "deepest nesting of arrays and objects a JSON body may have (400 beyond)")
	fs.StringVar(&s.opts.ReplicaID, "replica-id", "", "this orchestrator's name among the replicas sharing the stores, unique among live ones (GET /v2/system/replicas); empty means the host name")
	fs.StringVar(&s.opts.AdvertiseURL, "advertise-url", "", "where clients reach this replica's API, shown to operators in GET /v2/system/replicas; empty derives it from --listen (the host name for an unspecified host)")
	fs.DurationVar(&s.opts.LeaseTTL, "lease-ttl", 10*time.Second, "TTL of this replica's etcd lease (whole seconds): the work of a replica that dies (its clusters' watchers, groups' rsync actions, subscriptions' deliveries) moves to the others within it")
	fs.IntVar(&s.opts.ListPageSize, "list-page-size", 1000, "most objects a collection GET answers without ?limit= (1 to 10000); a longer list is paged, a Link header naming the next page (?limit=, ?continue=); a page also ends once its objects pass an eighth of --max-answer-memory (8 MiB at most)")
	fs.DurationVar(&s.opts.SelfHealDelay, "self-heal-delay", 2*time.Second, "how long a resource stays drifted (OutOfSync or Missing) before self-heal re-applies it, for DIGs and instances whose sync policy asks for self-heal; the wait after each heal something undid doubles from it, up to 5m")
	fs.IntVar(&s.opts.HistoryLimit, "history-limit", 1000, "history entries kept per deployment intent group and v1 instance (GET …/status/history); older ones are deleted")
	fs.IntVar(&s.opts.RevisionLimit, "revision-limit", appcontext.DefaultRevisionLimit, "revisions kept per deployment intent group for rollback (each instantiate, update, rollback and migrate makes one); older ones, and the manifests only they use, are deleted")
	fs.DurationVar(&s.opts.Fleet.JoinTokenTTL, "fleet-join-token-ttl", time.Hour, "how long a pull cluster's join token may be exchanged by its agent (single use)")
	fs.DurationVar(&s.opts.Fleet.UnreachableAfter, "fleet-unreachable-after", 15*time.Second, "how long a pull cluster may have no stream from its agent before it is Unreachable and its resources Unknown")
	fs.DurationVar(&s.opts.Fleet.Heartbeat, "fleet-heartbeat", 10*time.Second, "how often agents report when nothing changed (their monitor is Silent after --monitor-silent-after without a report)")
	fs.DurationVar(&s.opts.Fleet.LastSeenInterval, "fleet-last-seen-interval", hub.DefaultLastSeenInterval, "how often a connected pull cluster's last-seen time is written while nothing else is; it is also written when its agent's stream ends or goes silent, so this bounds how stale it is only after a replica dies")
	fs.DurationVar(&s.opts.MonitorSilentAfter, "monitor-silent-after", appcontext.DefaultSilentAfter, "how long a cluster's monitor may go unheard — its Lease unrenewed, or a pull cluster's agent without a report — before it is Silent and the cluster's resources Unknown; longer than --fleet-heartbeat and than the monitors' --lease-renew-interval")
	fs.IntVar(&s.opts.Fleet.MaxAgents, "fleet-max-agents", 20000, "most pull clusters' agents this replica serves at once; more are told to try another replica")
	fs.StringVar(&s.opts.AAI.URL, "aai-url", "", "ONAP AAI base URL (e.g. https://aai:8443/aai/v24); empty turns the AAI sink off")
	fs.StringVar(&s.opts.AAI.Username, "aai-username", "", "AAI user name")
	fs.StringVar(&s.opts.AAI.PasswordFile, "aai-password-file", "", "file holding the AAI password")
	fs.Var(&s.tenants, "aai-tenants", "comma-separated cloud-region=tenant-id pairs: the AAI tenant of each region's instances")
	fs.StringVar(&s.opts.AAI.SelfLink, "aai-selflink-url", "", "this API's external base URL, for the selflink of AAI objects; empty leaves selflink out")
	s.opts.FieldValidation = "Warn"
	fs.Var(config.OneOf{Value: &s.opts.FieldValidation, Allowed: []string{"Strict", "Warn", "Ignore"}}, "field-validation",
		"how clusters treat manifest fields a kind's schema lacks, unless a DIG or instance says: Warn (drop them, show a warning per field, as Helm and EMCO), Ignore (drop them silently) or Strict (fail the resource)")
	lim := &s.opts.Archive
	lim.MaxCompressed, lim.MaxUncompressed, lim.MaxFileSize = archive.DefaultMaxCompressed, archive.DefaultMaxUncompressed, archive.DefaultMaxFileSize
	fs.Var(config.Size{Value: &lim.MaxCompressed}, "archive-max-size", "largest chart or profile archive accepted, as uploaded (compressed); larger is refused with 413")
	fs.Var(config.Size{Value: &lim.MaxUncompressed}, "archive-max-unpacked", "most an archive may unpack to, all files and tar headers together")
	fs.Var(config.Size{Value: &lim.MaxFileSize}, "archive-max-file", "largest file inside an archive")
	fs.IntVar(&lim.MaxEntries, "archive-max-entries", archive.DefaultMaxEntries, "most files and directories in an archive")
	fs.IntVar(&lim.MaxDepth, "archive-max-depth", archive.DefaultMaxDepth, "most path components of an archive entry")
	fs.Int64Var(&lim.MaxRatio, "archive-max-ratio", archive.DefaultMaxRatio, "most bytes an archive may unpack to per compressed byte (checked past the first MiB)")
	ro := &s.opts.Render
	ro.MemoryLimit, ro.MaxOutput = render.DefaultMemoryLimit, render.DefaultMaxOutput
	fs.IntVar(&ro.Workers, "render-workers", render.DefaultWorkers, "Helm renders at a time, each in a warm child process of this binary")
	fs.DurationVar(&ro.Timeout, "render-timeout", render.DefaultTimeout, "longest one Helm render may take; its worker is killed and the app fails with a render-limit reason")
	fs.Var(config.Size{Value: &ro.MemoryLimit}, "render-memory", "memory one render worker may use (heap watchdog, and RLIMIT_AS over its start-up size)")
	fs.Var(config.Size{Value: &ro.MaxOutput}, "render-max-output", "most manifests one render may produce")
	fs.IntVar(&ro.MaxRequests, "render-worker-requests", render.DefaultMaxRenders, "requests a render worker serves before it is replaced")
	fs.Float64Var(&s.memRatio, "memory-limit-ratio", rlimit.DefaultMemoryRatio, "share of the container's memory limit (its cgroup's), less what the render workers may use (each its start-up size, one its --render-memory over that), that the Go runtime keeps its memory under (GOMEMLIMIT): it collects harder instead of being killed for memory; none is set when that leaves under a quarter of the limit; 0 turns it off; GOMEMLIMIT in the environment wins")
	s.logFormat, s.logLevel = "json", "info"
	fs.Var(config.OneOf{Value: &s.logFormat, Allowed: logging.Formats}, "log-format", "log format: json or text")
	fs.Var(config.OneOf{Value: &s.logLevel, Allowed: logging.Levels}, "log-level", "log level: debug, info, warn or error")
	return fs
}

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	if render.IsWorker(args) { // a render child process of an orchestrator
		return render.WorkerMain(args[1:])
	}
	var s settings
	fs := Flags(&s)
	fs.SetOutput(stderr)
	if err := config.Parse(fs, args, config.Sources{Getenv: getenv}); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "orchestrator:", err)
		return 2
	}
	log, err := logging.New(stderr, s.logFormat, s.logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "orchestrator:", err)
		return 2
	}
	if !(s.memRatio >= 0 && s.memRatio <= 1) {
		fmt.Fprintf(stderr, "orchestrator: --memory-limit-ratio %v: want 0 (off) or a share up to 1\n", s.memRatio)
		return 2
	}
	s.opts.EtcdEndpoints = s.endpoints
	if s.opts.HTTP.MinBodyRate == 0 {
		s.opts.HTTP.MinBodyRate = -1 // the flag's 0 is off; the option's is the default
	}
	s.opts.CallbackAllow = s.allow
	s.opts.CallbackDeny = s.deny
	s.opts.LogicalClouds.ReservedUsers = s.reserved
	if len(s.tenants) > 0 {
		s.opts.AAI.Tenants = map[string]string{}
		for _, pair := range s.tenants {
			region, tenant, ok := strings.Cut(pair, "=")
			if !ok || region == "" || tenant == "" {
				fmt.Fprintf(stderr, "orchestrator: --aai-tenants: %q is not cloud-region=tenant-id\n", pair)
				return 2
			}
			s.opts.AAI.Tenants[region] = tenant
		}
	}
	s.opts.Logger = log
	app, err := orchestrator.New(s.opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	logging.RouteKlog(log.WithField("component", "client-go"))
	if _, err := rlimit.SetMemoryLimit(rlimit.MemoryOptions{Ratio: s.memRatio, Reserve: renderReserve(s.opts.Render),
		Logger: log.WithField("component", "memlimit")}); err != nil {
		log.WithError(err).Warn("the Go runtime's memory limit is left unset")
	}
	if rlimit.SetGCPercent(getenv, rlimit.DefaultGCPercent) {
		log.WithField("gogc", rlimit.DefaultGCPercent).Debug("the collector's target set (GOGC unset)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx); err != nil {
		log.WithError(err).Error("orchestrator stopped")
		return 1
	}
	log.Info("orchestrator stopped")
	return 0
}
