package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/fleetsim"
	"github.com/argus-mc/argus/src/internal/logging"
)

// fleet runs simulated pull clusters (real agents, in-memory clusters)
// against an orchestrator until stopped: a benchmark tool (issue 26).
func fleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster fleet", flag.ContinueOnError)
	var o fleetsim.SimulateOptions
	api := fs.String("orchestrator", "http://127.0.0.1:9015", "comma-separated orchestrator URLs; the first registers the clusters")
	fs.IntVar(&o.Clusters, "clusters", 100, "pull clusters to register and run")
	fs.StringVar(&o.Provider, "provider", "fleet", "cluster provider (created when missing)")
	fs.StringVar(&o.Label, "label", "fleet", "label given to every cluster, for placement")
	fs.StringVar(&o.Prefix, "prefix", "sim", "prefix of the clusters' names")
	fs.Float64Var(&o.Churn, "churn", 0, "status changes per cluster per minute")
	fs.DurationVar(&o.FlapEvery, "flap-every", 0, "disconnect --flap-fraction of the clusters this often, for half the period (0: never)")
	fs.Float64Var(&o.FlapFraction, "flap-fraction", 0.1, "fraction of the clusters each flap disconnects")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the churn's and flaps' choices")
	if code := parseFlags(fs, args, false, stderr); code >= 0 {
		return code
	}
	o.API = strings.Split(*api, ",")
	logger, err := logging.New(stderr, "text", "info")
	if err != nil {
		fmt.Fprintf(stderr, "simcluster fleet: %v\n", err)
		return 2
	}
	o.Logger = logrus.NewEntry(logger)
	sum, err := fleetsim.Simulate(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster fleet: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "clusters=%d changes=%d flaps=%d agent_errors=%d\n", sum.Clusters, sum.Changes, sum.Flaps, len(sum.Errors))
	if len(sum.Errors) > 0 {
		fmt.Fprintf(stderr, "simcluster fleet: %v\n", sum.Errors[0])
		return 1
	}
	return 0
}
