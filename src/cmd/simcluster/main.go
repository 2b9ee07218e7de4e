// Command simcluster runs simulated Kubernetes clusters (real kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok) for tests and the demo:
//
//	simcluster up --clusters 2 --nodes 3 --dir /tmp/sim
//
// It writes DIR/<cluster>/kubeconfig per cluster and DIR/ready once every
// cluster serves, then stays in the foreground until SIGINT or SIGTERM and
// stops every process it started.
//
// It is also the demo's toolbox, so that `make demo` needs nothing but Go,
// curl and tar on the machine (no kubectl, jq or Python):
//
//	simcluster apply --kubeconfig K deployments/kubernetes/monitor/*.yaml
//	simcluster pod-state --kubeconfig K --selector app=backend --state not-ready
//	simcluster receive --listen 127.0.0.1:9018 --out notifications.log
//	curl -s localhost:9015/v2/... | simcluster json ready-status
//
// And the fleet simulator (issue 26, a benchmark tool): N pull clusters in
// this process, each a real agent on an in-memory cluster, with churn and
// flapping links (package fleetsim; make bench-fleet drives it itself):
//
//	simcluster fleet --orchestrator http://127.0.0.1:9015 --clusters 1000 --churn 10
//
// And the tests' stores (package storeproc): the embedded etcd, and
// FerretDB with --mongo, in a process built without the race detector,
// printing "stores: {json}" once they answer:
//
//	simcluster stores --dir /tmp/stores --mongo
//
// Exit codes: 0 on success (or after a clean stop), 1 when the work failed,
// 2 for invalid arguments.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/simcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage:
  simcluster up --clusters N [--nodes M] --dir DIR [--bin-dir DIR]
  simcluster apply --kubeconfig FILE [--timeout D] MANIFEST...
  simcluster pod-state --kubeconfig FILE [--namespace NS] --selector SELECTOR --state not-ready|crashloop|failed|succeeded|ready
  simcluster receive [--listen ADDR] [--out FILE]
  simcluster json [PATH] < DOCUMENT
  simcluster fleet [--orchestrator URLS] [--clusters N] [--churn PER_CLUSTER_PER_MIN] [--flap-every D] [--flap-fraction F]
  simcluster stores --dir DIR [--mongo]`

// run dispatches to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "up":
		return up(ctx, args[1:], stdout, stderr)
	case "apply":
		return apply(ctx, args[1:], stdout, stderr)
	case "pod-state":
		return podState(ctx, args[1:], stdout, stderr)
	case "receive":
		return receive(ctx, args[1:], stdout, stderr)
	case "json":
		return jsonCmd(args[1:], stdin, stdout, stderr)
	case "fleet":
		return fleet(ctx, args[1:], stdout, stderr)
	case "stores":
		return stores(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "simcluster: unknown subcommand %q\n%s\n", args[0], usage)
	return 2
}

// readyInfo is written to DIR/ready, for scripts that wait for it.
type readyInfo struct {
	Clusters []readyCluster `json:"clusters"`
}

type readyCluster struct {
	Name       string `json:"name"`
	Server     string `json:"server"`
	Kubeconfig string `json:"kubeconfig"`
}

func up(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts simcluster.Options
	fs.IntVar(&opts.Clusters, "clusters", 1, "number of clusters (named cluster1..N)")
	fs.IntVar(&opts.Nodes, "nodes", 3, "fake nodes per cluster")
	fs.StringVar(&opts.Dir, "dir", "", "directory for kubeconfigs, logs and etcd data (required)")
	fs.StringVar(&opts.BinDir, "bin-dir", simcluster.DefaultBinDir(), "directory holding the Kubernetes binaries (make sim)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "simcluster: unexpected arguments: %s\n%s\n", strings.Join(fs.Args(), " "), usage)
		return 2
	}
	log, _ := logging.New(stderr, "text", "info")
	opts.Logger = logrus.NewEntry(log)
	if opts.Dir != "" {
		opts.Dir, _ = filepath.Abs(opts.Dir)
	}

	begin := time.Now()
	fmt.Fprintf(stdout, "simcluster: starting %d cluster(s) with %d node(s) each in %s\n", opts.Clusters, opts.Nodes, opts.Dir)
	set, err := simcluster.Start(ctx, opts)
	if errors.Is(err, simcluster.ErrInvalid) {
		fmt.Fprintf(stderr, "simcluster: %v\n%s\n", err, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "simcluster: %v\n", err)
		return 1
	}
	defer set.Stop()

	info := readyInfo{}
	for _, c := range set.Clusters {
		info.Clusters = append(info.Clusters, readyCluster{Name: c.Name, Server: c.Server, Kubeconfig: c.KubeconfigPath})
		fmt.Fprintf(stdout, "  %s  %s  kubeconfig: %s\n", c.Name, c.Server, c.KubeconfigPath)
	}
	data, _ := json.MarshalIndent(info, "", "  ")
	readyPath := filepath.Join(opts.Dir, "ready")
	err = os.WriteFile(readyPath+".tmp", data, 0o644)
	if err == nil {
		err = os.Rename(readyPath+".tmp", readyPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "simcluster: write ready file: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "simcluster: ready in %.1fs; Ctrl-C stops every cluster\n", time.Since(begin).Seconds())

	<-ctx.Done()
	fmt.Fprintln(stdout, "simcluster: stopping")
	_ = os.Remove(readyPath) // best effort: the directory may be gone already
	set.Stop()
	fmt.Fprintln(stdout, "simcluster: stopped")
	return 0
}
