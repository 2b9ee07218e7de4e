package e2e

import (
	"flag"
	"testing"
	"time"
)

// The package's tests mostly wait: for clusters to converge, Leases to
// lapse, retries to back off. Run one after another they took 12-13 of
// make test's minutes, so they run in lanes: one test at a time within a
// lane, the lanes side by side. A test names its lane first thing; the
// lane says what the test may touch, so tests that would see each other's
// effects never overlap.
var lanes = struct{ shared, ownClusters, noClusters chan struct{} }{
	shared:      make(chan struct{}, 1),
	ownClusters: make(chan struct{}, 1),
	noClusters:  make(chan struct{}, 1),
}

// sharedClusters is the lane of tests that deploy to the package's
// clusters (sim), run monitors on them, or count what is there: they see
// each other's Deployments, bundles and monitors, so they never overlap.
func sharedClusters(t *testing.T) { inLane(t, lanes.shared) }

// ownClusters is the lane of tests that start clusters of their own
// (faultClusters, testenv.Clusters): one such set at a time, since each
// costs two API servers' worth of CPU.
func ownClusters(t *testing.T) { inLane(t, lanes.ownClusters) }

// noClusters is the lane of tests that write nothing to any cluster (at
// most they register one, or fail before an apply): catalogue, archive,
// input and process tests.
func noClusters(t *testing.T) { inLane(t, lanes.noClusters) }

// alone marks a test that takes no lane: it runs by itself, before the
// lanes start (go test runs the tests that are not parallel first). The HA
// tests do, as their faults are timed against leases of seconds, and so
// does a test that measures the whole test binary's render workers: the
// lanes' load would stretch those timings and blur that measure, not test
// them. The shared lane takes longest, so they add little to the whole.
func alone(*testing.T) {}

// inLane runs t beside the tests of other lanes, and after the test of its
// own lane that holds it has cleaned up (the lane is released by the
// first cleanup registered, which runs last).
func inLane(t *testing.T, lane chan struct{}) {
	t.Helper()
	t.Parallel()
	start := time.Now()
	lane <- struct{}{}
	t.Cleanup(func() { <-lane })
	// The test's elapsed time includes this wait; the log says how much.
	t.Logf("lane: waited %s for the test before", time.Since(start).Round(time.Millisecond))
}

// parallelForLanes raises go test's -parallel (GOMAXPROCS by default, 2
// here) unless the command line set it: a test waiting for its lane holds
// one of those slots, so with fewer slots than tests the lanes would
// starve each other. The lanes, not -parallel, bound what runs at once.
func parallelForLanes() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "64")
	}
}
