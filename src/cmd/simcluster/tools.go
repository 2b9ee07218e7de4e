package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/receiver"
	"github.com/argus-mc/argus/src/internal/simcluster"
)

// parseFlags parses args into fs, which must leave no argument over unless
// allowArgs; it reports the exit code to return, or -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string, allowArgs bool, stderr io.Writer) int {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !allowArgs && fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments: %s\n%s\n", fs.Name(), strings.Join(fs.Args(), " "), usage)
		return 2
	}
	return -1
}

func kubeconfigFlag(fs *flag.FlagSet) *string {
	return fs.String("kubeconfig", "", "kubeconfig of the cluster, e.g. DIR/cluster1/kubeconfig from `simcluster up` (required)")
}

func loadConfig(name, path string, stderr io.Writer) (*rest.Config, bool) {
	if path == "" {
		fmt.Fprintf(stderr, "%s: --kubeconfig is required\n%s\n", name, usage)
		return nil, false
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: load kubeconfig: %v\n", name, err)
		return nil, false
	}
	return cfg, true
}

// apply server-side applies manifest files and waits for the CRDs among
// them to be served, so that a monitor started next finds its kind.
func apply(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster apply", flag.ContinueOnError)
	kubeconfig := kubeconfigFlag(fs)
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if code := parseFlags(fs, args, true, stderr); code >= 0 {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "simcluster apply: no manifest files given\n%s\n", usage)
		return 2
	}
	cfg, ok := loadConfig("simcluster apply", *kubeconfig, stderr)
	if !ok {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	objs, err := simcluster.ApplyFiles(ctx, cfg, simcluster.ApplyOptions{}, fs.Args()...)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster apply: %v\n", err)
		return 1
	}
	var crds []string
	for _, o := range objs {
		fmt.Fprintf(stdout, "applied %s %s\n", o.GetKind(), o.GetName())
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o.GetName())
		}
	}
	if err := simcluster.WaitEstablished(ctx, cfg, crds...); err != nil {
		fmt.Fprintf(stderr, "simcluster apply: %v\n", err)
		return 1
	}
	return 0
}

// podState drives a pod's simulated state and prints the pod's name.
func podState(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster pod-state", flag.ContinueOnError)
	kubeconfig := kubeconfigFlag(fs)
	namespace := fs.String("namespace", "default", "namespace of the pod")
	selector := fs.String("selector", "", "label selector; the first matching pod by name is changed (required)")
	state := fs.String("state", "", "the state kwok moves the pod to: "+strings.Join(simcluster.PodStates, ", ")+" (required)")
	if code := parseFlags(fs, args, false, stderr); code >= 0 {
		return code
	}
	if *selector == "" || !slices.Contains(simcluster.PodStates, *state) {
		fmt.Fprintf(stderr, "simcluster pod-state: --selector and --state (one of %s) are required\n%s\n", strings.Join(simcluster.PodStates, ", "), usage)
		return 2
	}
	cfg, ok := loadConfig("simcluster pod-state", *kubeconfig, stderr)
	if !ok {
		return 2
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster pod-state: client: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	name, err := simcluster.SetPodState(ctx, cs, *namespace, *selector, *state)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster pod-state: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, name)
	return 0
}

// receive runs a notification receiver until SIGINT or SIGTERM.
func receive(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster receive", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9018", "address to serve on; POST any path (e.g. /notify), GET /healthz")
	outPath := fs.String("out", "-", "file each notification is appended to; - is standard output")
	if code := parseFlags(fs, args, false, stderr); code >= 0 {
		return code
	}
	out := stdout
	if *outPath != "-" {
		f, err := os.OpenFile(*outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "simcluster receive: %v\n", err)
			return 2
		}
		defer func() { _ = f.Close() }() // every record was written before Run returned
		out = f
	}
	log, _ := logging.New(stderr, "text", "info")
	rc, err := receiver.New(receiver.Options{Listen: *listen, Out: out, Logger: logrus.NewEntry(log)})
	if err != nil {
		fmt.Fprintf(stderr, "simcluster receive: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "simcluster receive: listening on http://%s; notifications go to %s\n", rc.Addr(), *outPath)
	if err := rc.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "simcluster receive: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "simcluster receive: stopped after %d notification(s)\n", rc.Received())
	return 0
}
