package testenv

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/simcluster"
)

// StartClusters starts n simulated clusters with their data under dir,
// their etcd in a stores process (StoresBinary). It never builds the
// Kubernetes binaries: `make test` runs `make sim` first.
func StartClusters(ctx context.Context, dir string, n int) (*simcluster.Set, error) {
	bin, err := StoresBinary(dir)
	if err != nil {
		return nil, err
	}
	return simcluster.Start(ctx, simcluster.Options{Clusters: n, Dir: dir, StoresBinary: bin})
}

// Clusters starts n simulated clusters for one test and stops them when it
// ends, checking that none of their processes is left running.
func Clusters(t testing.TB, n int) *simcluster.Set {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := StartClusters(ctx, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := StopClusters(set); err != nil {
			t.Error(err)
		}
	})
	return set
}

// StopClusters stops a set and verifies that every process it ran is gone.
func StopClusters(set *simcluster.Set) error {
	pids := set.PIDs()
	set.Stop()
	if alive := Alive(pids); len(alive) > 0 {
		return fmt.Errorf("simulated cluster processes still running after stop: %v", alive)
	}
	return nil
}

// Alive returns the pids that still name a live process.
func Alive(pids []int) []int {
	var alive []int
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			alive = append(alive, pid)
		}
	}
	return alive
}

// MainWithClusters runs a test package with embedded stores and n simulated
// clusters shared by all its tests, then stops everything and fails the run
// if a process or goroutine was left behind.
func MainWithClusters(m *testing.M, n int, setup func(*Stores, *simcluster.Set) error) {
	var set *simcluster.Set
	os.Exit(run(m, func(s *Stores) error {
		dir, err := os.MkdirTemp("", "argus-sim-")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		set, err = StartClusters(ctx, dir, n)
		if err != nil {
			_ = os.RemoveAll(dir) // temp data
			return fmt.Errorf("start simulated clusters: %w", err)
		}
		return setup(s, set)
	}, func() error {
		if set == nil {
			return nil
		}
		defer func() { _ = os.RemoveAll(set.Dir()) }() // temp data
		return StopClusters(set)
	}))
}
