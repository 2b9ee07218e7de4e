package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// onCluster reports whether every resource placed on cluster has status want,
// and those elsewhere have other.
func byCluster(cluster, want, other string) func(*appcontext.Context) (bool, string) {
	return func(c *appcontext.Context) (bool, string) {
		counts := map[string]int{}
		ok := true
		for _, p := range c.Placements {
			for _, r := range p.Resources {
				st := p.StatusOf(r.Key()).Status
				counts[p.Cluster.Name+":"+st]++
				if (p.Cluster.Name == cluster && st != want) || (p.Cluster.Name != cluster && st != other) {
					ok = false
				}
			}
		}
		return ok, fmt.Sprint(counts)
	}
}

func startAPIServer(t *testing.T, set *simcluster.Set, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := set.Cluster(name).StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
}

// A cluster down at instantiate: its resources are Retrying while it is
// down, then Applied once it is back, with no user action. Terminate while
// Retrying ends the apply retries at once.
func TestUnreachableClusterIsRetried(t *testing.T) {
	ownClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("retry"), "/"+testenv.UniqueName("retry"))
	set := faultClusters(t)
	onboardOn(t, o, set, nil)
	down := set.Cluster("cluster2")
	down.StopAPIServer()

	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	o.waitContext(id, "cluster2 Retrying, cluster1 Applied", byCluster("cluster2", appcontext.RsyncRetrying, appcontext.RsyncApplied))

	startAPIServer(t, set, "cluster2")
	took := o.waitContext(id, "all Applied after the cluster came back", allResources(appcontext.RsyncApplied))
	t.Logf("cluster back: all Applied %s after its API server was ready (retry backoff)", took.Round(time.Millisecond))
	o.waitContext(id, "Instantiated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Instantiated, c.Status.Status
	})

	// Down again: terminate and instantiate again while the cluster is
	// unreachable; terminate cancels the retrying apply at once.
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id, "terminated", allResources(appcontext.RsyncDeleted))
	down.StopAPIServer()
	o.must(202, "POST", digPath+"/instantiate", nil)
	id2 := o.digState().ContextID
	o.waitContext(id2, "cluster2 Retrying again", byCluster("cluster2", appcontext.RsyncRetrying, appcontext.RsyncApplied))
	start := time.Now()
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id2, "apply cancelled, Terminating", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Terminating, c.Status.Status
	})
	t.Logf("terminate while Retrying: apply cancelled and Terminating after %s", time.Since(start).Round(time.Millisecond))
	o.waitContext(id2, "cluster1 Deleted while cluster2 is still down", func(c *appcontext.Context) (bool, string) {
		ok := true
		for _, p := range c.Placements {
			for _, r := range p.Resources {
				if p.Cluster.Name == "cluster1" && p.StatusOf(r.Key()).Status != appcontext.RsyncDeleted {
					ok = false
				}
			}
		}
		return ok, c.Status.Status
	})
	startAPIServer(t, set, "cluster2")
	o.waitContext(id2, "all Deleted once the cluster is back", allResources(appcontext.RsyncDeleted))
	o.waitContext(id2, "Terminated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Terminated, c.Status.Status
	})
}

// The orchestrator stopped while a cluster is down and its resources are
// Retrying, then started again, then the cluster: the work completes and
// nothing stays Pending or Retrying.
func TestRestartResumesRetryingWork(t *testing.T) {
	ownClusters(t)
	db, prefix := testenv.UniqueName("resume"), "/"+testenv.UniqueName("resume")
	o := startOrchestrator(t, db, prefix)
	set := faultClusters(t)
	onboardOn(t, o, set, nil)
	set.Cluster("cluster2").StopAPIServer()
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	o.waitContext(id, "cluster2 Retrying", byCluster("cluster2", appcontext.RsyncRetrying, appcontext.RsyncApplied))

	o.stop()
	o2 := startOrchestrator(t, db, prefix)
	startAPIServer(t, set, "cluster2")
	o2.waitContext(id, "all Applied after restart", allResources(appcontext.RsyncApplied))
	o2.waitContext(id, "Instantiated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Instantiated, c.Status.Status
	})
	o2.must(202, "POST", digPath+"/terminate", nil)
	o2.waitContext(id, "terminated", allResources(appcontext.RsyncDeleted))
}
