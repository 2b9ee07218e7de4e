// Command monitor runs in each workload cluster (in-cluster, or outside it
// with --kubeconfig) and keeps every ResourceBundleState's status current
// with the state and readiness of the objects it selects. It heartbeats a
// Lease so the orchestrator can tell a live cluster from a silent one.
//
// With --orchestrator it is also the cluster's agent (fleet mode, for a
// cluster the orchestrator cannot dial): it joins with --join-token once,
// keeps its own credential in the cluster, pulls its cluster's work over
// one stream, applies it, and streams the status back (docs/fleet.md).
//
// Exit codes: 0 after a clean stop, 1 when it failed while running, 2 for
// invalid configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argus-mc/argus/src/internal/config"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/monitor"
	"github.com/argus-mc/argus/src/internal/rlimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}

type settings struct {
	opts       monitor.Options
	agent      agentSettings
	kubeconfig string
	extraGVKs  string
	listen     string
	logFormat  string
	logLevel   string
	config     string
	memRatio   float64
}

// Flags defines the monitor's flags.
func Flags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	fs.StringVar(&s.config, config.ConfigFlag, "", "YAML file with flag values, keyed by flag name")
	fs.StringVar(&s.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to monitor; empty uses $KUBECONFIG or the in-cluster service account")
	fs.StringVar(&s.opts.Namespace, "namespace", "", "namespace to watch; empty watches all. Set, bundles and namespaced objects elsewhere are not tracked at all")
	fs.StringVar(&s.extraGVKs, "extra-gvks", "", "more kinds to track, comma-separated group/version/Kind (version/Kind for the core group)")
	fs.StringVar(&s.opts.ConfigMapName, "configmap", "argus-monitor", "ConfigMap in --lease-namespace whose key extra-gvks adds kinds at run time")
	fs.StringVar(&s.opts.LeaseNamespace, "lease-namespace", "kube-system", "namespace of the heartbeat Lease")
	fs.StringVar(&s.opts.LeaseName, "lease-name", "argus-monitor", "name of the heartbeat Lease")
	fs.DurationVar(&s.opts.RenewInterval, "lease-renew-interval", 10*time.Second, "how often the Lease is renewed")
	fs.DurationVar(&s.opts.CoalesceWindow, "coalesce-window", 50*time.Millisecond, "a change after this long without a sync of its bundle syncs at once; changes within it after a sync become one sync at its end")
	fs.DurationVar(&s.opts.MinWriteInterval, "min-write-interval", 500*time.Millisecond, "the average least time between two status writes of one bundle under churn (two may go out back to back after a quiet period)")
	fs.IntVar(&s.opts.Workers, "workers", 2, "bundles synced in parallel")
	fs.StringVar(&s.listen, "listen", ":8080", "address serving /healthz, /readyz and /metrics")
	agentFlags(fs, &s.agent)
	fs.Float64Var(&s.memRatio, "memory-limit-ratio", rlimit.DefaultMemoryRatio, "share of the container's memory limit (its cgroup's) that the Go runtime keeps its memory under (GOMEMLIMIT): it collects harder instead of being killed for memory; 0 turns it off; GOMEMLIMIT in the environment wins")
	s.logFormat, s.logLevel = "json", "info"
	fs.Var(config.OneOf{Value: &s.logFormat, Allowed: logging.Formats}, "log-format", "log format: json or text")
	fs.Var(config.OneOf{Value: &s.logLevel, Allowed: logging.Levels}, "log-level", "log level: debug, info, warn or error")
	return fs
}

func restConfig(kubeconfig string, getenv func(string) string) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = getenv("KUBECONFIG")
	}
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	var s settings
	fs := Flags(&s)
	fs.SetOutput(stderr)
	if err := config.Parse(fs, args, config.Sources{Getenv: getenv}); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "monitor:", err)
		return 2
	}
	extra, err := monitor.ParseGVKs(s.extraGVKs)
	if err != nil {
		fmt.Fprintln(stderr, "monitor: --extra-gvks:", err)
		return 2
	}
	s.opts.ExtraGVKs = extra
	log, err := logging.New(stderr, s.logFormat, s.logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "monitor:", err)
		return 2
	}
	if !(s.memRatio >= 0 && s.memRatio <= 1) {
		fmt.Fprintf(stderr, "monitor: --memory-limit-ratio %v: want 0 (off) or a share up to 1\n", s.memRatio)
		return 2
	}
	cfg, err := restConfig(s.kubeconfig, getenv)
	if err != nil {
		fmt.Fprintln(stderr, "monitor: Kubernetes client configuration:", err)
		return 2
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "argus-monitor"
	s.opts.Config = cfg

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.opts.Registerer = reg
	s.opts.Logger = logrus.NewEntry(log)
	if _, err := rlimit.SetMemoryLimit(rlimit.MemoryOptions{Ratio: s.memRatio, Logger: s.opts.Logger.WithField("component", "memlimit")}); err != nil {
		log.WithError(err).Warn("the Go runtime's memory limit is left unset")
	}
	if s.agent.orchestrator != "" {
		return runAgent(ctx, &s, cfg, log, reg, stderr)
	}
	m, err := monitor.New(s.opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	logging.RouteKlog(s.opts.Logger.WithField("component", "client-go"))

	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		fmt.Fprintln(stderr, "monitor: listen:", err)
		return 2
	}
	srv := &http.Server{Handler: httpHandler(m, reg), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.WithField("addr", ln.Addr().String()).Info("monitor serving health and metrics")

	runErr := m.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // only health and metrics; nothing to drain
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.WithError(err).Warn("health and metrics server stopped early")
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		log.WithError(runErr).Error("monitor stopped")
		return 1
	}
	log.Info("monitor stopped")
	return 0
}

func httpHandler(m *monitor.Monitor, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.Ready() {
			http.Error(w, "caches not synced yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
