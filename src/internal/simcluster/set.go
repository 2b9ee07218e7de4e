package simcluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	"github.com/argus-mc/argus/src/internal/storeproc"
)

// K8sVersion is the Kubernetes version the simulated clusters run.
const K8sVersion = "v1.34.4"

//go:embed stages/*.yaml
var stageFiles embed.FS

// kwokConfig is kwok's configuration followed by our stages.
func kwokConfig() []byte {
	var b strings.Builder
	b.WriteString(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: ` + FakeNodeAnnotation + `=fake
  disregardStatusWithAnnotationSelector: ` + ManualAnnotation + `=true
  cidr: ` + podCIDR + `
  nodeLeaseDurationSeconds: 40
  # kwok does not default these when a config file is given.
  nodeLeaseParallelism: 4
  nodePlayStageParallelism: 4
  podPlayStageParallelism: 8
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
`)
	entries, _ := stageFiles.ReadDir("stages")
	for _, e := range entries {
		data, _ := stageFiles.ReadFile("stages/" + e.Name())
		b.WriteString("---\n")
		b.Write(data)
	}
	return []byte(b.String())
}

// DefaultBinDir is where `make sim` (scripts/build-sim.sh) puts the binaries:
// $ARGUS_CACHE_DIR/k8s-<version>/bin, the cache defaulting to ~/.cache/argus.
func DefaultBinDir() string {
	cache := os.Getenv("ARGUS_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "argus")
	}
	return filepath.Join(cache, "k8s-"+K8sVersion, "bin")
}

// Options configures Start.
type Options struct {
	// Clusters to start, named cluster1..N; at least 1.
	Clusters int
	// Nodes per cluster; 0 means 3.
	Nodes int
	// Dir holds everything: DIR/<cluster>/ and the shared etcd's data.
	Dir string
	// BinDir holds the binaries; "" means DefaultBinDir().
	BinDir string
	// Logger; nil discards.
	Logger *logrus.Entry
	// APIServerOnly runs each cluster as its API server alone (without its
	// watch cache): objects are stored and watched, but no controller,
	// scheduler, node or kwok runs, so nothing reconciles them (a Pod's
	// status is whatever a client writes). About a third of a full
	// cluster's memory, for benchmarks that need many clusters.
	APIServerOnly bool
	// StoresBinary, when set, runs the shared etcd as that program's
	// stores process (package storeproc) instead of in this one: tests,
	// built with the race detector, set it so etcd is not.
	StoresBinary string

	// pickPort chooses API server ports; nil means a free loopback port.
	// Tests set it to hand out a busy one.
	pickPort func() (int, error)
}

// ErrInvalid marks bad options (as opposed to a failure while starting).
var ErrInvalid = errors.New("invalid options")

// Set is a group of simulated clusters sharing one embedded etcd.
type Set struct {
	Clusters []*Cluster
	dir      string
	log      *logrus.Entry
	etcd     *etcdstore.Store   // in this process, or
	etcdProc *storeproc.Process // in a stores process
	stopOnce sync.Once
}

// Dir is the directory holding the set's files.
func (s *Set) Dir() string { return s.dir }

// Start starts opts.Clusters clusters concurrently and returns when every one
// serves with Ready nodes. On failure it stops whatever it started.
func Start(ctx context.Context, opts Options) (*Set, error) {
	if opts.Clusters < 1 {
		return nil, fmt.Errorf("%w: --clusters must be at least 1, got %d", ErrInvalid, opts.Clusters)
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("%w: --nodes must be positive, got %d", ErrInvalid, opts.Nodes)
	}
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: a directory is required", ErrInvalid)
	}
	if opts.BinDir == "" {
		opts.BinDir = DefaultBinDir()
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: directory %s: %v", ErrInvalid, opts.Dir, err)
	}
	probe := filepath.Join(opts.Dir, ".writable")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return nil, fmt.Errorf("%w: directory %s is not writable: %v", ErrInvalid, opts.Dir, err)
	}
	_ = os.Remove(probe) // an empty file left behind is harmless
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make sim` to build the simulated clusters' binaries", b, opts.BinDir)
		}
	}

	s := &Set{dir: opts.Dir, log: opts.Logger}
	var endpoints []string
	if opts.StoresBinary != "" {
		proc, err := storeproc.Start(ctx, storeproc.Options{Binary: opts.StoresBinary, Dir: opts.Dir})
		if err != nil {
			return nil, fmt.Errorf("shared etcd: %w", err)
		}
		s.etcdProc, endpoints = proc, proc.Info().Etcd
	} else {
		etcd, err := etcdstore.Open(ctx, etcdstore.Options{DataDir: opts.Dir, Logger: opts.Logger.WithField("component", "etcd")})
		if err != nil {
			return nil, fmt.Errorf("shared etcd: %w", err)
		}
		s.etcd, endpoints = etcd, etcd.Endpoints()
	}
	for i := 1; i <= opts.Clusters; i++ {
		name := "cluster" + strconv.Itoa(i)
		s.Clusters = append(s.Clusters, &Cluster{
			Name:        name,
			Dir:         filepath.Join(opts.Dir, name),
			nodes:       opts.Nodes,
			apiOnly:     opts.APIServerOnly,
			binDir:      opts.BinDir,
			etcdServers: strings.Join(endpoints, ","),
			log:         opts.Logger.WithField("cluster", name),
			pickPort:    opts.pickPort,
		})
	}
	errs := make([]error, len(s.Clusters))
	var wg sync.WaitGroup
	for i, c := range s.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Cluster returns the named cluster, or nil.
func (s *Set) Cluster(name string) *Cluster {
	for _, c := range s.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// PIDs lists every running process of every cluster.
func (s *Set) PIDs() []int {
	var pids []int
	for _, c := range s.Clusters {
		pids = append(pids, c.PIDs()...)
	}
	if s.etcdProc != nil {
		pids = append(pids, s.etcdProc.PID())
	}
	return pids
}

// Stop stops every process and the shared etcd, and waits for them.
func (s *Set) Stop() {
	s.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, c := range s.Clusters {
			wg.Add(1)
			go func() { defer wg.Done(); c.stop() }()
		}
		wg.Wait()
		var err error
		if s.etcdProc != nil {
			err = s.etcdProc.Stop()
		} else {
			err = s.etcd.Close()
		}
		if err != nil {
			s.log.WithError(err).Warn("closing the shared etcd")
		}
	})
}
