package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// Issue 17, EMCO day 2: a vfw-style DIG (packetgen, firewall, sink) on two
// clusters registered as edge01 and edge02; update, rollback, app
// dependencies, kv-pairs and cluster deletion, and a statusnotify watch.

const (
	vfwProject = "/v2/projects/vfw"
	vfwCA      = vfwProject + "/composite-apps/vfw/v1"
	vfwDIG     = vfwCA + "/deployment-intent-groups/vfw-dig"
)

var vfwApps = []string{"packetgen", "firewall", "sink"}

// vfwChart is a chart with a Deployment, a Service and a ConfigMap named
// after the release; values.version changes the ConfigMap.
func vfwChart(t *testing.T, name string) []byte {
	return tgz.FromInside(t, map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n",
		"values.yaml": "version: one\n",
		"templates/all.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: {{ .Release.Name }}}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}}
    spec:
      containers:
      - {name: main, image: "busybox:1.36"}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {app: {{ .Release.Name }}}
  ports:
  - port: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  version: {{ .Values.version | quote }}
`,
	})
}

// edges are the two simulated clusters as the issue names them.
var edges = []string{"edge01", "edge02"}

func edge(name string) *simcluster.Cluster {
	if name == "edge01" {
		return sim.Clusters[0]
	}
	return sim.Clusters[1]
}

// onboardVFW registers the clusters, the project and the vfw composite app
// with a DIG placing every app on both clusters (label edge).
func onboardVFW(t *testing.T, o *orch) {
	o.must(201, "POST", "/v2/cluster-providers", meta("vfw-cp"))
	for _, e := range edges {
		o.uploadOK("/v2/cluster-providers/vfw-cp/clusters", meta(e), edge(e).Kubeconfig)
		o.must(201, "POST", "/v2/cluster-providers/vfw-cp/clusters/"+e+"/labels", map[string]string{"clusterLabel": "edge"})
	}
	onboardComposite(t, o, "vfw", "vfw", "vfw-dig", vfwApps, func(a string) []byte { return vfwChart(t, a) },
		map[string]any{"clusterProvider": "vfw-cp", "clusterLabel": "edge"})
}

// onboardComposite registers a project, a composite app (version v1) of
// apps, each with its chart and an empty profile (composite profile
// "<ca>-profile"), and a DIG (version r1) placing every app by sel.
func onboardComposite(t *testing.T, o *orch, project, ca, dig string, apps []string, chart func(app string) []byte, sel map[string]any) {
	t.Helper()
	caPath := "/v2/projects/" + project + "/composite-apps/" + ca + "/v1"
	digPath := caPath + "/deployment-intent-groups/" + dig
	if code, body := o.call("POST", "/v2/projects", meta(project)); code != 201 && code != 409 {
		t.Fatalf("project %s: %d %s", project, code, body)
	}
	o.must(201, "POST", "/v2/projects/"+project+"/composite-apps", obj(ca, map[string]any{"compositeAppVersion": "v1"}))
	o.must(201, "POST", caPath+"/composite-profiles", meta(ca+"-profile"))
	for _, a := range apps {
		o.uploadOK(caPath+"/apps", meta(a), chart(a))
		o.uploadOK(caPath+"/composite-profiles/"+ca+"-profile/profiles", obj(a+"-profile", map[string]any{"app": a}),
			testenv.ArchiveFiles(t, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""}))
	}
	o.must(201, "POST", caPath+"/deployment-intent-groups", obj(dig, map[string]any{"compositeProfile": ca + "-profile", "version": "r1"}))
	o.must(201, "POST", digPath+"/generic-placement-intents", meta("gpi"))
	for _, a := range apps {
		o.must(201, "POST", digPath+"/generic-placement-intents/gpi/app-intents", placementOn(a, sel))
	}
	o.must(201, "POST", digPath+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
}

func placementOn(app string, sel map[string]any) map[string]any {
	return obj(app+"-placement-intent", map[string]any{"app": app, "intent": map[string]any{"allOf": []any{sel}}})
}

// deploymentUID is the Deployment's uid on a cluster, "" when it is gone
// or going.
func deploymentUID(t *testing.T, cluster, name string) types.UID {
	t.Helper()
	d, err := edge(cluster).Clientset().AppsV1().Deployments("default").Get(context.Background(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		t.Fatalf("%s: deployment %s: %v", cluster, name, err)
	case d.DeletionTimestamp != nil:
		return ""
	}
	return d.UID
}

// waitDeployment polls until the Deployment is present (or absent) on a
// cluster, 60 s at most, and returns how long that took.
func waitDeployment(t *testing.T, cluster, name string, present bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 60*time.Second {
		if (deploymentUID(t, cluster, name) != "") == present {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s: deployment %s present=%v not reached in 60s", cluster, name, present)
	return 0
}

// statusWatch follows a DIG with the statusnotify gRPC service, as emcoctl
// watch does, and keeps each notification with its arrival time.
type statusWatch struct {
	mu    sync.Mutex
	got   []received
	wake  chan struct{}
	close func()
}

type received struct {
	at time.Time
	n  *pb.StatusNotification
}

func watchDIG(t *testing.T, addr string, status pb.StatusValue, digName string) *statusWatch {
	t.Helper()
	return watchStatus(t, addr, &pb.StatusRegistration{ClientId: testenv.UniqueName("watch"), StatusType: status, Output: pb.OutputType_SUMMARY,
		Key: &pb.StatusRegistration_DigKey{DigKey: &pb.DigKey{Project: "vfw", CompositeApp: "vfw", CompositeAppVersion: "v1", DeploymentIntentGroup: digName}}})
}

// watchStatus registers reg with the statusnotify gRPC service at addr.
func watchStatus(t *testing.T, addr string, reg *pb.StatusRegistration) *statusWatch {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	client := pb.NewStatusNotifyClient(conn)
	stream, err := client.StatusRegister(ctx, reg, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	w := &statusWatch{wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := stream.Recv()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.got = append(w.got, received{time.Now(), n})
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}()
	w.close = func() {
		cancel()
		<-done
		_ = conn.Close()
	}
	t.Cleanup(w.close)
	return w
}

// next waits (60 s at most) for a notification with value want after index
// from, and returns its index and arrival time.
func (w *statusWatch) next(t *testing.T, from int, want pb.StatusValue) (int, time.Time) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		w.mu.Lock()
		for i := from; i < len(w.got); i++ {
			if w.got[i].n.GetStatusValue() == want {
				at := w.got[i].at
				w.mu.Unlock()
				return i, at
			}
		}
		n := len(w.got)
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-deadline:
			t.Fatalf("no %s notification after #%d in 60s (%d received)", want, from, n)
		}
	}
}

// digActionAt is when the DIG's action that made revision rev was recorded.
func digActionAt(t *testing.T, o *orch, dig catalog.Key, rev int64) time.Time {
	t.Helper()
	st, err := o.catalog.GetDIGState(context.Background(), dig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Actions {
		if a.Revision == rev {
			return a.TimeStamp
		}
	}
	t.Fatalf("no action of revision %d in %+v", rev, st.Actions)
	return time.Time{}
}

// lastRevision is the revision of the DIG's latest action in its status.
func (o *orch) lastRevision(dig string) int64 {
	o.t.Helper()
	v := o.waitJSON(dig+"/status?status=deployed", "status", func(map[string]any) bool { return true })
	actions, _ := v["states"].(map[string]any)["actions"].([]any)
	if len(actions) == 0 {
		o.t.Fatalf("no actions in %v", v)
	}
	return int64(actions[len(actions)-1].(map[string]any)["revision"].(float64))
}

func TestDayTwoUpdateRollbackDependenciesKvPairs(t *testing.T) {
	sharedClusters(t)
	grpcAddr := testenv.FreeAddr(t)
	o := startOrchestrator(t, testenv.UniqueName("day2"), "/"+testenv.UniqueName("day2"),
		func(opts *orchestrator.Options) { opts.GRPCListen = grpcAddr })
	startMonitors(t, sim)
	onboardVFW(t, o)

	kvPath := "/v2/cluster-providers/vfw-cp/clusters/edge01/kv-pairs"
	checkKvPairs(t, o, kvPath)

	o.must(202, "POST", vfwDIG+"/approve", nil)
	o.must(202, "POST", vfwDIG+"/instantiate", nil)
	o.waitJSON(vfwDIG+"/status?status=ready", "vfw DIG Ready", func(v map[string]any) bool {
		return v["deployedStatus"] == "Instantiated" && v["readyStatus"] == "Ready"
	})
	if rev := o.lastRevision(vfwDIG); rev != 1 {
		t.Fatalf("revision after instantiate = %d, want 1", rev)
	}
	fw01 := deploymentUID(t, "edge01", "firewall")
	if fw01 == "" || deploymentUID(t, "edge02", "firewall") == "" {
		t.Fatal("firewall is not on both clusters after instantiate")
	}

	// A statusnotify watch (DEPLOYED), opened before the update.
	w := watchDIG(t, grpcAddr, pb.StatusValue_DEPLOYED, "vfw-dig")
	first, _ := w.next(t, 0, pb.StatusValue_DEPLOYED)

	// The firewall's app intent changes to edge01 only (allowed while
	// instantiated), then update: 202 with the revision.
	o.must(200, "PUT", vfwDIG+"/generic-placement-intents/gpi/app-intents/firewall-placement-intent",
		placementOn("firewall", map[string]any{"clusterProvider": "vfw-cp", "cluster": "edge01"}))
	asked := time.Now()
	code, body := o.call("POST", vfwDIG+"/update", nil)
	rev, err := strconv.ParseInt(strings.TrimSpace(body), 10, 64)
	if code != 202 || err != nil || rev < 2 {
		t.Fatalf("update: %d %q, want 202 with a revision >= 2", code, body)
	}
	left := waitDeployment(t, "edge02", "firewall", false)
	t.Logf("update (revision %d): the firewall Deployment left edge02 %s after the 202 (acceptance: within 60 s)", rev, left.Round(time.Millisecond))
	o.waitJSON(vfwDIG+"/status?status=deployed", "update done", deployedStatusIs("Updated"))
	if got := deploymentUID(t, "edge01", "firewall"); got != fw01 {
		t.Fatalf("the firewall on edge01 was replaced (uid %s, was %s): it should stay", got, fw01)
	}
	for _, a := range []string{"packetgen", "sink"} {
		if deploymentUID(t, "edge02", a) == "" {
			t.Fatalf("%s left edge02 with the firewall", a)
		}
	}
	if got := o.lastRevision(vfwDIG); got != rev {
		t.Fatalf("status revision = %d, want %d", got, rev)
	}
	checkWatchSawUpdate(t, o, w, first, asked, rev)

	// Rollback to revision 1: the firewall comes back to edge02.
	start := time.Now()
	o.must(202, "POST", vfwDIG+"/rollback", map[string]any{"metadata": map[string]any{"description": "back"}, "spec": map[string]any{"revision": "1"}})
	waitDeployment(t, "edge02", "firewall", true)
	t.Logf("rollback to revision 1: the firewall Deployment was back on edge02 %s after the 202 (acceptance: within 60 s)", time.Since(start).Round(time.Millisecond))
	o.waitJSON(vfwDIG+"/status?status=ready", "rolled back and Ready", func(v map[string]any) bool {
		return v["deployedStatus"] == "Updated" && v["readyStatus"] == "Ready"
	})
	if got := o.lastRevision(vfwDIG); got != rev+1 {
		t.Fatalf("revision after rollback = %d, want %d", got, rev+1)
	}
	if got := deploymentUID(t, "edge01", "firewall"); got != fw01 {
		t.Fatalf("the firewall on edge01 was replaced by the rollback")
	}
	checkRollbackHistory(t, o, rev)
	o.must(404, "POST", vfwDIG+"/rollback", map[string]any{"spec": map[string]any{"revision": "99"}})
	o.must(400, "POST", vfwDIG+"/rollback", map[string]any{"spec": map[string]any{"revision": "one"}})

	// App dependencies: packetgen after the firewall is Ready, 2 s more.
	checkDependencyRules(t, o)

	// Dependencies take effect with the next instantiate (or update): the
	// context records those it was deployed with. The rollback left the
	// intents as they were: the firewall goes back to both clusters.
	o.must(200, "PUT", vfwDIG+"/generic-placement-intents/gpi/app-intents/firewall-placement-intent",
		placementOn("firewall", map[string]any{"clusterProvider": "vfw-cp", "clusterLabel": "edge"}))
	o.must(202, "POST", vfwDIG+"/terminate", nil)
	o.waitJSON(vfwDIG+"/status?status=deployed", "terminated", deployedStatusIs("Terminated"))

	checkDependencyOrder(t, o)

	// After terminate, the kv-pairs, the label and the cluster go, 204 each.
	o.must(204, "DELETE", kvPath+"/vfw-kv", nil)
	o.must(204, "DELETE", "/v2/cluster-providers/vfw-cp/clusters/edge01/labels/edge", nil)
	o.must(204, "DELETE", "/v2/cluster-providers/vfw-cp/clusters/edge01", nil)
	o.must(404, "GET", "/v2/cluster-providers/vfw-cp/clusters/edge01", nil)
	for _, a := range vfwApps {
		if deploymentUID(t, "edge02", a) != "" {
			t.Fatalf("%s still on edge02 after terminate", a)
		}
	}
}

// checkKvPairs: kv-pairs are stored and read back as clm has them.
func checkKvPairs(t *testing.T, o *orch, kvPath string) {
	t.Helper()
	o.must(201, "POST", kvPath, obj("vfw-kv", map[string]any{"kv": []any{map[string]any{"vfw_private_ip": "192.0.2.10"}, map[string]any{"site": "edge01"}}}))
	if body := o.must(200, "GET", kvPath+"/vfw-kv", nil); !strings.Contains(body, `"vfw_private_ip":"192.0.2.10"`) || !strings.Contains(body, `"site":"edge01"`) {
		t.Fatalf("kv-pair read back: %s", body)
	}
	if body := o.must(200, "GET", kvPath+"/vfw-kv?key=site", nil); strings.TrimSpace(body) != `{"value":"edge01"}` {
		t.Fatalf("kv-pair value: %s", body)
	}
	o.must(404, "GET", kvPath+"/vfw-kv?key=nothing", nil)
	if body := o.must(200, "GET", kvPath, nil); !strings.Contains(body, `"name":"vfw-kv"`) {
		t.Fatalf("kv-pairs list: %s", body)
	}
	o.must(200, "PUT", kvPath+"/vfw-kv", obj("vfw-kv", map[string]any{"kv": []any{map[string]any{"site": "edge-01"}}}))
	if body := o.must(200, "GET", kvPath+"/vfw-kv?key=site", nil); !strings.Contains(body, "edge-01") {
		t.Fatalf("kv-pair after PUT: %s", body)
	}
}

// checkRollbackHistory: the history lists the actions with their revisions.
func checkRollbackHistory(t *testing.T, o *orch, rev int64) {
	t.Helper()
	var hist struct {
		History []history.Entry `json:"history"`
	}
	if err := json.Unmarshal([]byte(o.must(200, "GET", vfwDIG+"/status/history", nil)), &hist); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range hist.History {
		if e.Kind == "action" {
			actions = append(actions, fmt.Sprintf("%s/%d", e.To.State, e.Revision))
		}
	}
	if want := fmt.Sprintf("Created/0,Approved/0,Instantiated/1,Updated/%d,Updated/%d", rev, rev+1); strings.Join(actions, ",") != want {
		t.Fatalf("history actions %v, want %s", actions, want)
	}
}

// checkDependencyRules adds packetgen's dependency on the firewall and
// checks the refusals: itself, a missing app, a bad status, a cycle.
func checkDependencyRules(t *testing.T, o *orch) {
	t.Helper()
	depPath := vfwCA + "/apps/packetgen/dependency"
	o.must(201, "POST", depPath, obj("firewall", map[string]any{"app": "firewall", "opStatus": "Ready", "wait": 2}))
	if body := o.must(200, "GET", depPath+"/firewall", nil); !strings.Contains(body, `"opStatus":"Ready"`) || !strings.Contains(body, `"wait":2`) {
		t.Fatalf("dependency read back: %s", body)
	}
	o.must(400, "POST", depPath, obj("self", map[string]any{"app": "packetgen", "opStatus": "Ready"}))
	o.must(400, "POST", depPath, obj("nope", map[string]any{"app": "nope", "opStatus": "Ready"}))
	o.must(400, "POST", depPath, obj("bad", map[string]any{"app": "sink", "opStatus": "Running"}))
	// A cycle is refused when a DIG is approved (and on update).
	o.must(201, "POST", vfwCA+"/apps/firewall/dependency", obj("packetgen", map[string]any{"app": "packetgen", "opStatus": "Deployed"}))
	o.must(201, "POST", vfwCA+"/deployment-intent-groups", obj("other-dig", map[string]any{"compositeProfile": "vfw-profile", "version": "r1"}))
	if code, body := o.call("POST", vfwCA+"/deployment-intent-groups/other-dig/approve", nil); code != 400 || !strings.Contains(body, "cycle") {
		t.Fatalf("approve with a dependency cycle: %d %s, want 400 naming the cycle", code, body)
	}
	if code, body := o.call("POST", vfwDIG+"/update", nil); code != 400 || !strings.Contains(body, "cycle") {
		t.Fatalf("update with a dependency cycle: %d %s, want 400", code, body)
	}
	o.must(204, "DELETE", vfwCA+"/apps/firewall/dependency/packetgen", nil)
	o.must(204, "DELETE", vfwCA+"/deployment-intent-groups/other-dig", nil)
}

// checkDependencyOrder instantiates again: packetgen waits (Waiting,
// with the reason) and is created at least 2 s after the firewall, on each
// cluster; terminate deletes it before the firewall.
func checkDependencyOrder(t *testing.T, o *orch) {
	t.Helper()
	added := map[string]func(string) time.Time{}
	for _, e := range edges {
		added[e] = watchDeployments(t, e, watch.Added)
	}
	o.must(202, "POST", vfwDIG+"/instantiate", nil)
	sawWaiting := ""
	o.waitJSON(vfwDIG+"/status?status=deployed&app=packetgen", "packetgen Waiting for the firewall", func(v map[string]any) bool {
		for _, a := range asList(v["apps"]) {
			for _, c := range asList(a.(map[string]any)["clusters"]) {
				for _, r := range asList(c.(map[string]any)["resources"]) {
					res := r.(map[string]any)
					if res["rsync-status"] == "Waiting" && strings.Contains(fmt.Sprint(res["reason"]), "firewall") {
						sawWaiting = fmt.Sprint(res["reason"])
						return true
					}
				}
			}
		}
		return false
	})
	t.Logf("packetgen while it waits: Waiting, %q", sawWaiting)
	o.waitJSON(vfwDIG+"/status?status=ready", "re-instantiated and Ready", func(v map[string]any) bool {
		return v["deployedStatus"] == "Instantiated" && v["readyStatus"] == "Ready"
	})
	for _, e := range edges {
		fwAt, pgAt := added[e]("firewall"), added[e]("packetgen")
		gap := pgAt.Sub(fwAt)
		t.Logf("%s: packetgen's Deployment created %s after the firewall's (acceptance: at least 2 s)", e, gap.Round(time.Millisecond))
		if fwAt.IsZero() || pgAt.IsZero() || gap < 2*time.Second {
			t.Errorf("%s: packetgen created %s after the firewall, want at least 2 s", e, gap)
		}
	}

	// Terminate: packetgen (the dependent) goes before the firewall.
	deleted := map[string]func(string) time.Time{}
	for _, e := range edges {
		deleted[e] = watchDeployments(t, e, watch.Deleted)
	}
	o.must(202, "POST", vfwDIG+"/terminate", nil)
	o.waitJSON(vfwDIG+"/status?status=deployed", "terminated again", deployedStatusIs("Terminated"))
	for _, e := range edges {
		pg, fw := deleted[e]("packetgen"), deleted[e]("firewall")
		if pg.IsZero() || fw.IsZero() || fw.Before(pg) {
			t.Fatalf("%s: terminate deleted the firewall at %s, packetgen at %s: packetgen (which depends on it) must go first", e, fw, pg)
		}
		t.Logf("%s: terminate in reverse dependency order: packetgen deleted %s before the firewall", e, fw.Sub(pg).Round(time.Millisecond))
	}
}

// checkWatchSawUpdate: the statusnotify watch saw the update's change
// (Updating: NOT_DEPLOYED) within 2 s of it, then DEPLOYED again. The
// change happened after the update was asked for, so the time since then
// bounds the delay from above.
func checkWatchSawUpdate(t *testing.T, o *orch, w *statusWatch, first int, asked time.Time, rev int64) {
	t.Helper()
	// The watch saw the change (Updating: NOT_DEPLOYED) within 2 s of it.
	// The change is the context's status written Updating, right after the
	// update recorded its action (with this time) in the DIG's state, so
	// the time since that action bounds the delay from above — not the
	// time since the call was asked, which adds the rendering.
	i, at := w.next(t, first+1, pb.StatusValue_NOT_DEPLOYED)
	changed := digActionAt(t, o, catalog.Key{"vfw", "vfw", "v1", "vfw-dig"}, rev)
	latency := at.Sub(changed)
	t.Logf("statusnotify: the DIG's change to Updating reached the gRPC watch at most %s after it happened, %s after the update was asked (acceptance: within 2 s; fails over 10 s)",
		latency.Round(time.Millisecond), at.Sub(asked).Round(time.Millisecond))
	if latency > 10*time.Second { // 5× the target: CI headroom; docs/benchmarks.md keeps the 2 s
		t.Errorf("the statusnotify watch printed the change %s after it happened, more than 10 s", latency)
	}
	w.next(t, i+1, pb.StatusValue_DEPLOYED)
}

func asList(v any) []any { l, _ := v.([]any); return l }

// watchDeployments records when each Deployment in default of a cluster
// had an event of the type (Added: created; Deleted: deleted, or marked
// for deletion), from now on.
func watchDeployments(t *testing.T, cluster string, typ watch.EventType) func(name string) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := edge(cluster).Clientset().AppsV1().Deployments("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			m, err := apimeta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			hit := ev.Type == typ || (typ == watch.Deleted && ev.Type == watch.Modified && m.GetDeletionTimestamp() != nil)
			if !hit {
				continue
			}
			mu.Lock()
			if _, ok := seen[m.GetName()]; !ok {
				seen[m.GetName()] = time.Now()
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		wi.Stop()
		cancel()
		<-done
	})
	return func(name string) time.Time {
		mu.Lock()
		defer mu.Unlock()
		return seen[name]
	}
}

// Migrate (EMCO's POST …/migrate): DIG v1 (mweb, mold) hands its deployment
// to DIG v2 (mweb with other values, mnew). The target keeps the source's
// status context id, so mweb is changed in place; mold goes, mnew comes;
// the target's readiness comes from the same bundles; the source ends.
func TestDayTwoMigrate(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("mig"), "/"+testenv.UniqueName("mig"))
	startMonitors(t, sim)
	ctx := context.Background()
	o.must(201, "POST", "/v2/cluster-providers", meta("mig-cp"))
	o.uploadOK("/v2/cluster-providers/mig-cp/clusters", meta("edge01"), edge("edge01").Kubeconfig)
	o.must(201, "POST", "/v2/projects", meta("mig"))
	version := func(v string, apps ...string) string {
		ca := "/v2/projects/mig/composite-apps/mig/" + v
		o.must(201, "POST", "/v2/projects/mig/composite-apps", obj("mig", map[string]any{"compositeAppVersion": v}))
		o.must(201, "POST", ca+"/composite-profiles", meta("prof"))
		for _, a := range apps {
			o.uploadOK(ca+"/apps", meta(a), vfwChart(t, a))
			o.uploadOK(ca+"/composite-profiles/prof/profiles", obj(a+"-profile", map[string]any{"app": a}),
				testenv.ArchiveFiles(t, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""}))
		}
		dig := ca + "/deployment-intent-groups/dig-" + v
		o.must(201, "POST", ca+"/deployment-intent-groups", obj("dig-"+v, map[string]any{"compositeProfile": "prof", "version": "r1",
			"overrideValues": []any{map[string]any{"app": "mweb", "values": map[string]any{"version": v}}}}))
		o.must(201, "POST", dig+"/generic-placement-intents", meta("gpi"))
		for _, a := range apps {
			o.must(201, "POST", dig+"/generic-placement-intents/gpi/app-intents", placementOn(a, map[string]any{"clusterProvider": "mig-cp", "cluster": "edge01"}))
		}
		o.must(201, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
		o.must(202, "POST", dig+"/approve", nil)
		return dig
	}
	src := version("v1", "mweb", "mold")
	dst := version("v2", "mweb", "mnew")
	o.must(202, "POST", src+"/instantiate", nil)
	before := o.waitJSON(src+"/status?status=ready", "v1 Ready", func(v map[string]any) bool {
		return v["deployedStatus"] == "Instantiated" && v["readyStatus"] == "Ready"
	})
	web := deploymentUID(t, "edge01", "mweb")
	if web == "" || deploymentUID(t, "edge01", "mold") == "" {
		t.Fatal("v1 is not deployed")
	}

	o.must(400, "POST", src+"/migrate", map[string]any{"spec": map[string]any{"targetCompositeAppVersion": "v1", "targetDeploymentIntentGroup": "dig-v1"}})
	o.must(404, "POST", src+"/migrate", map[string]any{"spec": map[string]any{"targetCompositeAppVersion": "v2", "targetDeploymentIntentGroup": "nope"}})
	start := time.Now()
	o.must(202, "POST", src+"/migrate", map[string]any{"spec": map[string]any{"targetCompositeAppVersion": "v2", "targetDeploymentIntentGroup": "dig-v2"}})
	after := o.waitJSON(dst+"/status?status=ready", "v2 Ready after the migration", func(v map[string]any) bool {
		return v["deployedStatus"] == "Instantiated" && v["readyStatus"] == "Ready"
	})
	t.Logf("migrate v1 -> v2: the target Ready %s after the 202", time.Since(start).Round(time.Millisecond))
	waitDeployment(t, "edge01", "mold", false)
	if deploymentUID(t, "edge01", "mnew") == "" {
		t.Fatal("mnew was not created by the migration")
	}
	if got := deploymentUID(t, "edge01", "mweb"); got != web {
		t.Fatalf("mweb was replaced (uid %s, was %s): a migration changes common objects in place", got, web)
	}
	cm, err := edge("edge01").Clientset().CoreV1().ConfigMaps("default").Get(ctx, "mweb-config", metav1.GetOptions{})
	if err != nil || cm.Data["version"] != "v2" {
		t.Fatalf("mweb's ConfigMap after the migration: %v %v", cm, err)
	}
	statusCtx := func(v map[string]any) any { return v["states"].(map[string]any)["statusctxid"] }
	if statusCtx(after) != statusCtx(before) {
		t.Fatalf("the target's status context id %v is not the source's %v", statusCtx(after), statusCtx(before))
	}
	o.waitJSON(src+"/status?status=deployed", "v1 Terminated", deployedStatusIs("Terminated"))
	if d := deploymentUID(t, "edge01", "mweb"); d != web {
		t.Fatal("the source's end deleted the target's objects")
	}
	o.must(202, "POST", dst+"/terminate", nil)
	o.waitJSON(dst+"/status?status=deployed", "v2 Terminated", deployedStatusIs("Terminated"))
	for _, a := range []string{"mweb", "mnew"} {
		waitDeployment(t, "edge01", a, false)
	}
}
