package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/argus-mc/argus/src/internal/monitor"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// monitors runs a monitor per cluster, in-process, for one test.
type monitors struct {
	t       testing.TB
	set     *simcluster.Set
	running map[string]func()
	// renew is the Lease renewal interval; 0 is the monitor's default.
	renew time.Duration
}

func startMonitors(t testing.TB, set *simcluster.Set) *monitors {
	return startMonitorsRenewing(t, set, 0)
}

// startMonitorsRenewing starts monitors whose Leases renew every renew, so
// a test can see one go silent within seconds.
func startMonitorsRenewing(t testing.TB, set *simcluster.Set, renew time.Duration) *monitors {
	m := &monitors{t: t, set: set, running: map[string]func(){}, renew: renew}
	for _, c := range set.Clusters {
		m.start(c.Name)
	}
	t.Cleanup(func() {
		for name := range m.running {
			m.stop(name)
		}
	})
	return m
}

func (m *monitors) start(cluster string) {
	mon, err := monitor.New(monitor.Options{Config: m.set.Cluster(cluster).RESTConfig(), Registerer: prometheus.NewRegistry(), RenewInterval: m.renew})
	if err != nil {
		m.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mon.Run(ctx) }()
	m.running[cluster] = func() {
		cancel()
		if err := <-done; err != nil {
			m.t.Errorf("monitor %s: %v", cluster, err)
		}
	}
}

func (m *monitors) stop(cluster string) {
	if stop := m.running[cluster]; stop != nil {
		stop()
		delete(m.running, cluster)
	}
}

// status GETs the DIG status with the query and decodes it.
func (o *orch) status(query string) status.Response {
	o.t.Helper()
	body := o.must(200, "GET", digPath+"/status?"+query, nil)
	var r status.Response
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		o.t.Fatalf("decode status: %v\n%s", err, body)
	}
	return r
}

// waitStatus polls the status until cond holds (deadline 60s).
func (o *orch) waitStatus(query, what string, cond func(status.Response) (bool, string)) time.Duration {
	o.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < 60*time.Second {
		ok, state := cond(o.status(query))
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	o.t.Fatalf("%s: not true after 60s; last: %s", what, last)
	return 0
}

type resKey struct{ app, cluster, kind, name string }

func resources(r status.Response) map[resKey]status.Resource {
	out := map[resKey]status.Resource{}
	for _, a := range r.Apps {
		for _, c := range a.Clusters {
			for _, res := range c.Resources {
				out[resKey{a.Name, c.Cluster, res.GVK.Kind, res.Name}] = res
			}
		}
	}
	return out
}

func everythingReady(r status.Response) (bool, string) {
	pods := 0
	for k, res := range resources(r) {
		if k.kind == "Pod" {
			pods++
		}
		if res.ClusterStatus != "Present" || res.ReadyStatus != "Ready" {
			return false, fmt.Sprintf("%v %s/%s %s", k, res.ClusterStatus, res.ReadyStatus, res.Reason)
		}
	}
	// 2 clusters × (frontend 2 pods + backend 1 + cache 1).
	return r.Ready != nil && *r.Ready && pods == 8, fmt.Sprintf("ready=%v pods=%d counts=%v", r.Ready != nil && *r.Ready, pods, r.ReadyStatus)
}

// checkStatusBadInput: bad queries are refused, missing subjects are
// NotFound.
func checkStatusBadInput(t *testing.T, o *orch) {
	t.Helper()
	for q, want := range map[string]string{
		"output=everything": "summary, all, detail",
		"type=deployed":     "rsync, cluster",
		"cluster=cluster1":  "<provider>+<cluster>",
	} {
		if code, body := o.call("GET", digPath+"/status?"+q, nil); code != 400 || !strings.Contains(body, want) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	for path, code := range map[string]int{
		caPath + "/deployment-intent-groups/nope/status": 404,
		"/v2/cluster-providers/cp/clusters/nope/status":  404,
		digPath + "/status?instance=12345":               404,
		"/v1/instance/12345/status":                      404,
	} {
		if got, body := o.call("GET", path, nil); got != code {
			t.Errorf("GET %s: %d %s, want %d", path, got, body, code)
		}
	}
}

func TestStatusFollowsTheClusters(t *testing.T) {
	sharedClusters(t)
	startMonitors(t, sim)
	o := startOrchestrator(t, testenv.UniqueName("st"), "/"+testenv.UniqueName("st"))
	onboard(t, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	took := o.waitStatus("type=cluster", "every resource Present and Ready, pods included", everythingReady)
	t.Logf("instantiate to status ready (pods included): %s", took.Round(time.Millisecond))
	id := o.digState().ContextID

	// One pod not ready: it and its Deployment go Pending with reasons.
	c1 := sim.Cluster("cluster1").Clientset()
	pods, err := c1.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "emco/deployment-id=" + id + "-frontend"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("frontend pods: %v %v", pods, err)
	}
	bad := pods.Items[0].Name
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"not-ready"}}}`, simcluster.StateAnnotation)
	if _, err := c1.CoreV1().Pods("default").Patch(context.Background(), bad, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	o.waitStatus("type=cluster", "pod and deployment Pending", func(r status.Response) (bool, string) {
		all := resources(r)
		p, d := all[resKey{"frontend", "cluster1", "Pod", bad}], all[resKey{"frontend", "cluster1", "Deployment", "frontend"}]
		return !*r.Ready && p.ReadyStatus == "Pending" && strings.Contains(p.Reason, "not ready") &&
			d.ReadyStatus == "Pending" && strings.Contains(d.Reason, "1 of 2"), fmt.Sprintf("pod %+v deployment %+v", p, d)
	})
	shown := time.Since(start)
	t.Logf("pod not ready → status shows it: %s (target < 1s; fails over 5s)", shown.Round(time.Millisecond))
	if shown > 5*time.Second { // 5× the target: CI headroom; docs/benchmarks.md keeps the 1 s
		t.Errorf("pod not ready → status showed it after %s, want under 1s", shown)
	}

	// An applied object deleted behind Argus's back is NotPresent.
	if err := sim.Cluster("cluster2").Clientset().CoreV1().ConfigMaps("default").Delete(context.Background(), "cache-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	o.waitStatus("type=cluster", "deleted object NotPresent", func(r status.Response) (bool, string) {
		res := resources(r)[resKey{"cache", "cluster2", "ConfigMap", "cache-config"}]
		return res.ClusterStatus == "NotPresent" && res.ReadyStatus == "NotPresent" && r.ClusterStatus["NotPresent"] == 1, fmt.Sprint(res)
	})

	// Filters, each repeated and combined; counts follow.
	r := o.status("type=cluster&app=frontend&app=backend&cluster=cp%2Bcluster1")
	if len(r.Apps) != 2 || len(r.Apps[0].Clusters) != 1 || r.Apps[0].Clusters[0].Cluster != "cluster1" {
		t.Fatalf("app+cluster filter: %+v", r.Apps)
	}
	if total := r.ReadyStatus["Ready"] + r.ReadyStatus["Pending"]; total != 3+2+3+1 {
		t.Fatalf("counts under filters = %v", r.ReadyStatus)
	}
	r = o.status("type=cluster&cluster=" + url.QueryEscape("cp cluster2") + "&resource=Deployment/frontend&resource=cache-config")
	got := resources(r)
	if len(got) != 2 || got[resKey{"frontend", "cluster2", "Deployment", "frontend"}].Name == "" {
		t.Fatalf("cluster given with a space + resource filters: %v", got)
	}
	if r := o.status("type=rsync&output=summary"); r.Apps != nil || r.RsyncStatus["Applied"] != 18 || r.Ready != nil {
		t.Fatalf("summary: %+v", r)
	}
	r = o.status("type=cluster&output=detail&resource=Deployment/frontend&cluster=cp%2Bcluster1")
	d := resources(r)[resKey{"frontend", "cluster1", "Deployment", "frontend"}]
	if !strings.Contains(string(d.Detail), `"readyReplicas"`) {
		t.Fatalf("detail lacks the object's status: %s", d.Detail)
	}
	r = o.status("type=rsync&output=detail&resource=Deployment/frontend&cluster=cp%2Bcluster1")
	if d := resources(r)[resKey{"frontend", "cluster1", "Deployment", "frontend"}]; !strings.Contains(string(d.Detail), `"replicas":2`) {
		t.Fatalf("rsync detail lacks the manifest: %s", d.Detail)
	}
	if r := o.status("cluster=cp%2Bnowhere"); len(r.Apps) != 0 || len(r.RsyncStatus) != 0 {
		t.Fatalf("filter matching nothing: %+v", r)
	}
	if code, body := o.call("GET", digPath+"/status?app=nobody", nil); code != 400 || !strings.Contains(body, `"nobody"`) {
		t.Fatalf("an app the DIG does not have: %d %s, want 400 naming it (EMCO)", code, body)
	}

	// History: re-instantiate, then ask for the old instance.
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id, "terminated", allResources("Deleted"))
	o.must(202, "POST", digPath+"/instantiate", nil)
	id2 := o.digState().ContextID
	var list status.Instances
	_ = json.Unmarshal([]byte(o.must(200, "GET", digPath+"/status?instance", nil)), &list)
	if len(list.Instances) != 2 || list.Instances[0] != id || list.Instances[1] != id2 || list.Name != "dig1" {
		t.Fatalf("instances = %+v", list)
	}
	old := o.status("instance=" + id + "&type=rsync")
	if old.Status != "Terminated" || old.RsyncStatus["Deleted"] != 18 {
		t.Fatalf("old instance: status %s %v", old.Status, old.RsyncStatus)
	}
	o.waitStatus("type=cluster", "second instantiation ready", everythingReady)

	checkStatusBadInput(t, o)
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(id2, "terminated", allResources("Deleted"))
}
