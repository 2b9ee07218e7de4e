package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/storeproc"
)

// stores serves the tests' embedded stores until SIGTERM (package storeproc).
func stores(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simcluster stores", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts storeproc.ServeOptions
	fs.StringVar(&opts.Dir, "dir", "", "directory for the stores' data (required)")
	fs.BoolVar(&opts.Mongo, "mongo", false, "start FerretDB beside etcd")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opts.Dir == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "simcluster: stores needs --dir and no arguments\n%s\n", usage)
		return 2
	}
	log, _ := logging.New(stderr, "text", "warn")
	opts.Logger = logrus.NewEntry(log)
	if err := storeproc.Serve(ctx, opts, stdout); err != nil {
		fmt.Fprintf(stderr, "simcluster: stores: %v\n", err)
		return 1
	}
	return 0
}
