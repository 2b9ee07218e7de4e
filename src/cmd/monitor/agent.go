package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/argus-mc/argus/src/internal/fleet/agent"
)

// agentSettings are the flags of agent mode.
type agentSettings struct {
	orchestrator string
	joinToken    string
	caFile       string
	namespace    string
	secret       string
}

func agentFlags(fs *flag.FlagSet, a *agentSettings) {
	fs.StringVar(&a.orchestrator, "orchestrator", "", "agent mode: the orchestrator's URL (https, or http to a loopback address only), or several comma-separated: one picked at random, after a failure another (a fleet's agents spread over the replicas); empty runs the monitor alone")
	fs.StringVar(&a.joinToken, "join-token", "", "agent mode: the cluster's single-use join token, exchanged once for the agent's own credential (kept in --agent-secret); better given as $ARGUS_JOIN_TOKEN")
	fs.StringVar(&a.caFile, "orchestrator-ca", "", "agent mode: PEM file of the CA that signed the orchestrator's certificate; empty uses the system's")
	fs.StringVar(&a.namespace, "agent-namespace", "", "agent mode: namespace of the Secret holding the agent's credential; empty means $POD_NAMESPACE, else argus-system")
	fs.StringVar(&a.secret, "agent-secret", "argus-agent", "agent mode: name of the Secret holding the agent's credential")
}

// runAgent runs the monitor and the fleet agent until ctx ends. A refused
// join (or a revoked credential) ends it with exit code 1 and the reason.
func runAgent(ctx context.Context, s *settings, cfg *rest.Config, log *logrus.Logger, reg *prometheus.Registry, stderr io.Writer) int {
	var roots *x509.CertPool
	if s.agent.caFile != "" {
		pem, err := os.ReadFile(s.agent.caFile)
		if err != nil {
			fmt.Fprintln(stderr, "monitor: --orchestrator-ca:", err)
			return 2
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fmt.Fprintln(stderr, "monitor: --orchestrator-ca: no PEM certificate in", s.agent.caFile)
			return 2
		}
	}
	urls, err := agent.ParseOrchestrators(s.agent.orchestrator, roots)
	if err != nil {
		fmt.Fprintln(stderr, "monitor: --orchestrator:", err)
		return 2
	}
	ns := s.agent.namespace
	if ns == "" {
		if ns = os.Getenv("POD_NAMESPACE"); ns == "" {
			ns = "argus-system"
		}
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "monitor:", err)
		return 2
	}
	entry := logrus.NewEntry(log)
	mopts := s.opts
	cluster, err := agent.NewKubeCluster(agent.KubeOptions{Config: cfg, Monitor: &mopts, Logger: entry.WithField("component", "agent")})
	if err != nil {
		fmt.Fprintln(stderr, "monitor:", err)
		return 2
	}
	a, err := agent.New(agent.Options{Orchestrators: urls, RootCAs: roots, JoinToken: s.agent.joinToken, Cluster: cluster,
		Credentials: agent.SecretCredentials{Client: kube, Namespace: ns, Name: s.agent.secret}, Version: "argus",
		Logger: entry.WithField("component", "agent")})
	if err != nil {
		fmt.Fprintln(stderr, "monitor:", err)
		return 2
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		fmt.Fprintln(stderr, "monitor: listen:", err)
		return 2
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if state, reason := cluster.Monitor(); reason != "" {
			http.Error(w, state+": "+reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.WithField("addr", ln.Addr().String()).Info("agent serving health and metrics")

	runErr := a.Run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.WithError(err).Warn("health and metrics server stopped early")
	}
	if runErr != nil {
		log.WithError(runErr).Error("agent stopped")
		fmt.Fprintln(stderr, "monitor: agent:", runErr)
		return 1
	}
	log.Info("agent stopped")
	return 0
}
