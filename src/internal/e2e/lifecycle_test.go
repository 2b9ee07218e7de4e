package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// Update re-renders and applies the difference under the same context:
// changed objects change in place, objects no longer placed are deleted.
func TestUpdateAppliesTheDifference(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("upd"), "/"+testenv.UniqueName("upd"))
	onboard(t, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	o.waitContext(id, "Instantiated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Instantiated, c.Status.Status
	})
	ctx := context.Background()
	c2 := sim.Cluster("cluster2").Clientset()
	before, err := c2.AppsV1().Deployments("default").Get(ctx, "backend", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// frontend to 3 replicas; cache only on cluster1.
	o.must(200, "PUT", caPath+"/deployment-intent-groups/dig1", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1",
		"overrideValues": []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "3"}}}}))
	o.must(200, "PUT", digPath+"/generic-placement-intents/gpi/app-intents/cache-placement", obj("cache-placement", map[string]any{
		"app": "cache", "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "cluster": "cluster1"}}}}))
	o.must(202, "POST", digPath+"/update", nil)
	if st := o.digState(); st.Current != catalog.StateUpdated || st.ContextID != id {
		t.Fatalf("after update: state %s context %s (want Updated, %s)", st.Current, st.ContextID, id)
	}
	o.waitContext(id, "Updated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Updated, c.Status.Status
	})
	c, _ := o.contexts.Get(ctx, id)
	for _, p := range c.Placements {
		for _, r := range p.Resources {
			want := appcontext.RsyncApplied
			if p.App == "cache" && p.Cluster.Name == "cluster2" {
				want = appcontext.RsyncDeleted
			}
			if got := p.StatusOf(r.Key()).Status; got != want {
				t.Errorf("%s on %s: %s is %s, want %s", p.App, p.Cluster, r.Key(), got, want)
			}
		}
	}
	for _, cl := range sim.Clusters {
		d, err := cl.Clientset().AppsV1().Deployments("default").Get(ctx, "frontend", metav1.GetOptions{})
		if err != nil || *d.Spec.Replicas != 3 || d.Labels["emco/deployment-id"] != id+"-frontend" {
			t.Fatalf("%s: frontend after update: %v %v", cl.Name, d, err)
		}
	}
	if d, err := c2.AppsV1().Deployments("default").Get(ctx, "cache", metav1.GetOptions{}); err == nil && d.DeletionTimestamp == nil {
		t.Fatal("cache is still on cluster2 after the update moved it off")
	}
	if _, err := sim.Cluster("cluster1").Clientset().AppsV1().Deployments("default").Get(ctx, "cache", metav1.GetOptions{}); err != nil {
		t.Fatalf("cache left cluster1: %v", err)
	}
	after, err := c2.AppsV1().Deployments("default").Get(ctx, "backend", metav1.GetOptions{})
	if err != nil || after.Spec.Template.Labels["emco/deployment-id"] != before.Spec.Template.Labels["emco/deployment-id"] || after.Generation != before.Generation {
		t.Fatalf("an unchanged app was changed by the update: generation %d → %d", before.Generation, after.Generation)
	}
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id, "Terminated", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Terminated, c.Status.Status
	})
}

// Stop cancels the action in flight; terminate then cleans up.
func TestStopCancelsTheActionInFlight(t *testing.T) {
	ownClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("stop"), "/"+testenv.UniqueName("stop"))
	set := faultClusters(t)
	onboardOn(t, o, set, nil)
	if code, body := o.call("POST", digPath+"/stop", nil); code != 409 {
		t.Fatalf("stop with nothing running: %d %s", code, body)
	}
	set.Cluster("cluster2").StopAPIServer()
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	o.waitContext(id, "Retrying on cluster2", byCluster("cluster2", appcontext.RsyncRetrying, appcontext.RsyncApplied))
	o.must(202, "POST", digPath+"/stop", nil)
	if st := o.digState(); st.Current != catalog.StateInstantiateStopped {
		t.Fatalf("state after stop = %s", st.Current)
	}
	c, _ := o.contexts.Get(context.Background(), id)
	if c.Status.Status != appcontext.InstantiateFailed || c.Status.Error != "stopped by the user" {
		t.Fatalf("context after stop: %+v", c.Status)
	}
	if code, body := o.call("POST", digPath+"/stop", nil); code != 409 {
		t.Fatalf("second stop: %d %s", code, body)
	}
	startAPIServer(t, set, "cluster2")
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id, "terminated after stop", allResources(appcontext.RsyncDeleted))
}

// Without the monitor's CRD the bundles cannot be applied, and the
// deployment still succeeds, promptly.
func TestDeploysWithoutTheMonitorCRD(t *testing.T) {
	ownClusters(t)
	set := testenv.Clusters(t, 2) // no CRD installed
	o := startOrchestrator(t, testenv.UniqueName("nocrd"), "/"+testenv.UniqueName("nocrd"))
	onboardOn(t, o, set, nil)
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	took := o.waitContext(id, "Instantiated without bundles", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Instantiated, c.Status.Status
	})
	t.Logf("instantiated without the ResourceBundleState CRD in %s", took.Round(time.Millisecond))
	if ok, state := allResources(appcontext.RsyncApplied)(mustContext(t, o, id)); !ok {
		t.Fatalf("resources: %s", state)
	}
}

func mustContext(t *testing.T, o *orch, id string) *appcontext.Context {
	t.Helper()
	c, err := o.contexts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
