package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// The compatibility tests of issue 28: what k8splugin's KUD scripts, CDS,
// EMCO's examples and emcoctl still found different.

// gone reports an object deleted (or on its way: background deletion).
func gone(m metav1.Object, err error) bool {
	return apierrors.IsNotFound(err) || (err == nil && m.GetDeletionTimestamp() != nil)
}

// TestK8spluginCreate runs kud/tests/plugin_edgex.sh's logic with the
// orchestrator's default options: the create answers once the resources
// exist, so the script's kubectl get right after finds them; then a
// create whose apply fails, a release name that is no DNS label and a
// profile with configresource files.
func TestK8spluginCreate(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("k8sc"), "/"+testenv.UniqueName("k8sc"))
	cl := sim.Cluster("cluster2")
	cs := cl.Clientset()
	ctx := context.Background()
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "kud", "cloud-owner": "localhost"}, cl.Kubeconfig); code != 201 {
		t.Fatalf("connectivity-info: %d %s", code, body)
	}

	// plugin_edgex.sh: definition, content, profile (release name and
	// namespace), profile content, instance; then read the cluster at once.
	const ns = "plugin-tests-namespace"
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "edgex", "rb-version": "plugin_test", "chart-name": "frontend"})
	o.must(200, "POST", "/v1/rb/definition/edgex/plugin_test/content", testenv.Archive(t, filepath.Join("testdata/charts", "frontend")))
	o.must(201, "POST", "/v1/rb/definition/edgex/plugin_test/profile", map[string]any{"rb-name": "edgex", "rb-version": "plugin_test",
		"profile-name": "test_profile", "release-name": "test-release", "namespace": ns})
	o.must(200, "POST", "/v1/rb/definition/edgex/plugin_test/profile/test_profile/content", testenv.ArchiveFiles(t, map[string]string{
		"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": "message: edgex\n"}))
	start := time.Now()
	body := o.must(201, "POST", "/v1/instance", map[string]any{"rb-name": "edgex", "rb-version": "plugin_test",
		"profile-name": "test_profile", "cloud-region": "kud"})
	t.Logf("POST /v1/instance with default options answered in %s", time.Since(start).Round(time.Millisecond))
	var inst catalog.InstanceSpec
	if err := json.Unmarshal([]byte(body), &inst); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(ns).Get(ctx, "test-release", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubectl get deployment right after the create: %v", err)
	}
	if _, err := cs.CoreV1().Services(ns).Get(ctx, "test-release", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubectl get service right after the create: %v", err)
	}
	// The request as k8splugin answers it: empty fields are there.
	got := o.must(200, "GET", "/v1/instance/"+inst.ID, nil)
	for _, want := range []string{`"release-name":""`, `"labels":null`, `"override-values":null`, `"release-name":"test-release"`} {
		if !strings.Contains(got, want) {
			t.Fatalf("GET instance lacks %s: %s", want, got)
		}
	}
	o.must(202, "DELETE", "/v1/instance/"+inst.ID, nil)

	testCreateReverts(t, o)
	testBadReleaseName(t, o)
	testConfigResource(t, o)

	o.must(204, "DELETE", "/v1/rb/definition/edgex/plugin_test/profile/test_profile", nil)
	o.must(204, "DELETE", "/v1/rb/definition/edgex/plugin_test", nil)
	o.must(204, "DELETE", "/v1/connectivity-info/kud", nil)
}

// testCreateReverts creates an instance whose Service the API server
// refuses: the create answers 500 with k8splugin's "Create Kubernetes
// Resources" reason, and neither the instance nor what was applied
// before the failure (its ConfigMap, its Deployment) is left.
func testCreateReverts(t *testing.T, o *orch) {
	cs := sim.Cluster("cluster2").Clientset()
	ctx := context.Background()
	const ns = "revert-ns"
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "bad", "rb-version": "v1"})
	o.must(200, "POST", "/v1/rb/definition/bad/v1/content", testenv.ArchiveFiles(t, map[string]string{
		"bad/Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\n",
		"bad/templates/all.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad-config}\ndata: {a: b}\n---\n" +
			deploymentAndService("bad", 70000)}))
	o.must(201, "POST", "/v1/rb/definition/bad/v1/profile", map[string]any{"rb-name": "bad", "rb-version": "v1",
		"profile-name": "p", "release-name": "bad", "namespace": ns})
	// A Service of the failing one's name that is not the instance's: the
	// revert must leave it.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, body := o.call("POST", "/v1/instance", map[string]any{"rb-name": "bad", "rb-version": "v1", "profile-name": "p", "cloud-region": "kud"})
	t.Logf("a create whose Service is refused answered %d in %s: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(body))
	if code != 500 || !strings.Contains(body, "Create Kubernetes Resources") || !strings.Contains(body, "Service bad") {
		t.Fatalf("failed create: %d %s", code, body)
	}
	if list := o.must(200, "GET", "/v1/instance?rb-name=bad", nil); list != "[]\n" {
		t.Fatalf("the failed instance is still listed: %s", list)
	}
	if d, err := cs.AppsV1().Deployments(ns).Get(ctx, "bad", metav1.GetOptions{}); !gone(d, err) {
		t.Fatalf("the failed instance's Deployment is left: %v", err)
	}
	if c, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "bad-config", metav1.GetOptions{}); !gone(c, err) {
		t.Fatalf("the failed instance's ConfigMap is left: %v", err)
	}
	if svc, err := cs.CoreV1().Services(ns).Get(ctx, "bad", metav1.GetOptions{}); gone(svc, err) || svc.Spec.Ports[0].Port != 8080 {
		t.Fatalf("the revert touched a Service that was not the instance's: %v", err)
	}
	rbs, err := cs.RESTClient().Get().AbsPath("/apis/k8splugin.io/v1alpha1/namespaces/" + ns + "/resourcebundlestates").DoRaw(ctx)
	if err != nil || strings.Contains(string(rbs), `"name":"bad-`) {
		t.Fatalf("the failed instance's ResourceBundleState is left: %v %s", err, rbs)
	}
	o.must(204, "DELETE", "/v1/rb/definition/bad/v1", nil)
}

// testBadReleaseName: a release name that is no DNS-1123 label is refused
// before rendering, and nothing reaches the cluster.
func testBadReleaseName(t *testing.T, o *orch) {
	cs := sim.Cluster("cluster2").Clientset()
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "named", "rb-version": "v1"})
	o.must(200, "POST", "/v1/rb/definition/named/v1/content", testenv.Archive(t, filepath.Join("testdata/charts", "frontend")))
	o.must(201, "POST", "/v1/rb/definition/named/v1/profile", map[string]any{"rb-name": "named", "rb-version": "v1",
		"profile-name": "p", "namespace": "badname-ns"})
	code, body := o.call("POST", "/v1/instance", map[string]any{"rb-name": "named", "rb-version": "v1", "profile-name": "p",
		"cloud-region": "kud", "release-name": "Bad_Name"})
	if code != 400 || !strings.Contains(body, "Bad_Name") || !strings.Contains(body, "DNS") {
		t.Fatalf("release-name Bad_Name: %d %s", code, body)
	}
	if list := o.must(200, "GET", "/v1/instance?rb-name=named", nil); list != "[]\n" {
		t.Fatalf("an instance was recorded: %s", list)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "badname-ns", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused instance's namespace reached the cluster: %v", err)
	}
	o.must(204, "DELETE", "/v1/rb/definition/named/v1", nil)
}

// testConfigResource: a profile's configresource file replaces the chart's
// (KUD's testrb profile), so the cluster holds the profile's ConfigMap.
func testConfigResource(t *testing.T, o *orch) {
	cs := sim.Cluster("cluster2").Clientset()
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "cfgres", "rb-version": "v1"})
	o.must(200, "POST", "/v1/rb/definition/cfgres/v1/content", testenv.ArchiveFiles(t, map[string]string{
		"cfgres/Chart.yaml":               "apiVersion: v2\nname: cfgres\nversion: 0.1.0\n",
		"cfgres/templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-cfg'}\ndata: {from: chart}\n",
	}))
	o.must(201, "POST", "/v1/rb/definition/cfgres/v1/profile", map[string]any{"rb-name": "cfgres", "rb-version": "v1",
		"profile-name": "p", "release-name": "cfgres", "namespace": "default"})
	o.must(200, "POST", "/v1/rb/definition/cfgres/v1/profile/p/content", testenv.ArchiveFiles(t, map[string]string{
		"manifest.yaml": "version: v1\ntype:\n  configresource:\n  - filepath: testfol/subdir/configmap.yaml\n" +
			"    chartpath: cfgres/templates/configmap.yaml\n",
		"testfol/subdir/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-cfg'}\ndata: {from: profile}\n",
	}))
	var inst catalog.InstanceSpec
	_ = json.Unmarshal([]byte(o.must(201, "POST", "/v1/instance", map[string]any{"rb-name": "cfgres", "rb-version": "v1",
		"profile-name": "p", "cloud-region": "kud"})), &inst)
	cm, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), "cfgres-cfg", metav1.GetOptions{})
	if err != nil || cm.Data["from"] != "profile" {
		t.Fatalf("configresource not rendered: %v %v", cm.Data, err)
	}
	o.must(202, "DELETE", "/v1/instance/"+inst.ID, nil)
	o.must(204, "DELETE", "/v1/rb/definition/cfgres/v1", nil)
}

// hookChart is examples/test-dependency's nginx chart in small: a
// Deployment and a Service with a pre-install hook pod (no delete policy),
// a post-install hook pod deleted once it succeeded, and a pre-delete hook
// pod. The hook pods complete (sim.argus.io/state: succeeded) as the
// example's `sleep 10` pods do.
func hookChart(t *testing.T) []byte {
	pod := func(name, hook, policy string) string {
		p := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  annotations:\n    helm.sh/hook: " + hook +
			"\n    sim.argus.io/state: succeeded\n"
		if policy != "" {
			p += "    helm.sh/hook-delete-policy: " + policy + "\n"
		}
		return p + "spec:\n  restartPolicy: Never\n  containers: [{name: hook, image: busybox, command: [sh, -c, 'sleep 10']}]\n---\n"
	}
	return testenv.ArchiveFiles(t, map[string]string{
		"hooked/Chart.yaml": "apiVersion: v2\nname: hooked\nversion: 0.1.0\n",
		"hooked/templates/hooks.yaml": pod("pre-install-hook-pod", "pre-install", "") +
			pod("post-install-hook-pod", "post-install", "hook-succeeded") + pod("pre-delete-hook-pod", "pre-delete", ""),
		"hooked/templates/app.yaml": deploymentAndService("hooked", 80),
	})
}

// deploymentAndService is a chart template: a Deployment and its Service
// on port (which may be one the API server refuses).
func deploymentAndService(name string, port int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec: {containers: [{name: main, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  selector: {app: %[1]s}
  ports: [{port: %[2]d}]
`, name, port)
}

// clusterEvent is one object change a test saw on a cluster, with the
// resourceVersion that orders it among the others.
type clusterEvent struct {
	kind, name string
	typ        watch.EventType
	rv         int64
	ready      bool // a Deployment with every replica ready
}

// clusterLog records the changes of the Pods and Deployments labelled
// argus.io/app=app in namespace ns, in order, until the test ends.
type clusterLog struct {
	mu     sync.Mutex
	events []clusterEvent
}

func watchApp(t *testing.T, cs kubernetes.Interface, ns, app string) *clusterLog {
	l := &clusterLog{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sel := metav1.ListOptions{LabelSelector: "argus.io/app=" + app}
	pods, err := cs.CoreV1().Pods(ns).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := cs.AppsV1().Deployments(ns).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []watch.Interface{pods, deps} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range w.ResultChan() {
				m, ok := ev.Object.(metav1.Object)
				if !ok {
					continue
				}
				rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
				e := clusterEvent{kind: "Pod", name: m.GetName(), typ: ev.Type, rv: rv}
				if d, ok := ev.Object.(*appsv1.Deployment); ok {
					e.kind, e.ready = "Deployment", d.Spec.Replicas != nil && d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.ReadyReplicas > 0
				}
				l.mu.Lock()
				l.events = append(l.events, e)
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		pods.Stop()
		deps.Stop()
		wg.Wait()
	})
	return l
}

// first is the resourceVersion of the first event matching, 0 if none.
func (l *clusterLog) first(match func(clusterEvent) bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if match(e) {
			return e.rv
		}
	}
	return 0
}

func added(kind, name string) func(clusterEvent) bool {
	return func(e clusterEvent) bool { return e.kind == kind && e.name == name && e.typ == watch.Added }
}

func deleted(kind, name string) func(clusterEvent) bool {
	return func(e clusterEvent) bool { return e.kind == kind && e.name == name && e.typ == watch.Deleted }
}

// TestHelmHooks deploys examples/test-dependency's shape of hooks through
// a DIG: the pre-install hook pod is created (and completes) before the
// app's Deployment, the post-install hook pod once the Deployment is
// ready, and deleted once it succeeded (hook-succeeded); terminate runs
// the pre-delete hook before deleting the Deployment, then removes every
// hook pod.
func TestHelmHooks(t *testing.T) {
	sharedClusters(t)
	startMonitors(t, sim)
	o := startOrchestrator(t, testenv.UniqueName("hook"), "/"+testenv.UniqueName("hook"))
	cl := sim.Cluster("cluster1")
	cs := cl.Clientset()
	const ca = "/v2/projects/hp/composite-apps/hca/v1"
	const dig = ca + "/deployment-intent-groups/hdig"
	o.must(201, "POST", "/v2/cluster-providers", meta("hcp"))
	o.uploadOK("/v2/cluster-providers/hcp/clusters", meta(cl.Name), cl.Kubeconfig)
	o.must(201, "POST", "/v2/projects", meta("hp"))
	o.must(201, "POST", "/v2/projects/hp/composite-apps", obj("hca", map[string]any{"compositeAppVersion": "v1"}))
	o.uploadOK(ca+"/apps", meta("hooked"), hookChart(t))
	o.must(201, "POST", ca+"/composite-profiles", meta("hcpf"))
	o.uploadOK(ca+"/composite-profiles/hcpf/profiles", obj("hooked-profile", map[string]any{"app": "hooked"}),
		testenv.ArchiveFiles(t, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""}))
	o.must(201, "POST", ca+"/deployment-intent-groups", obj("hdig", map[string]any{"compositeProfile": "hcpf", "version": "r1"}))
	o.must(201, "POST", dig+"/generic-placement-intents", meta("gpi"))
	o.must(201, "POST", dig+"/generic-placement-intents/gpi/app-intents", placementOn("hooked", map[string]any{"clusterProvider": "hcp", "cluster": cl.Name}))
	o.must(201, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	log := watchApp(t, cs, "default", "hooked")
	o.must(202, "POST", dig+"/approve", nil)
	start := time.Now()
	o.must(202, "POST", dig+"/instantiate", nil)

	var pre, deploy, ready, post, postGone int64
	waitFor(t, "the post-install hook pod created and deleted once it succeeded", func() (bool, string) {
		pre, deploy = log.first(added("Pod", "pre-install-hook-pod")), log.first(added("Deployment", "hooked"))
		ready = log.first(func(e clusterEvent) bool { return e.kind == "Deployment" && e.ready })
		post, postGone = log.first(added("Pod", "post-install-hook-pod")), log.first(deleted("Pod", "post-install-hook-pod"))
		return postGone > 0, fmt.Sprintf("pre %d deployment %d ready %d post %d deleted %d", pre, deploy, ready, post, postGone)
	})
	t.Logf("instantiate to the post-install hook done and deleted: %s", time.Since(start).Round(time.Millisecond))
	if pre == 0 || deploy == 0 || pre >= deploy {
		t.Fatalf("the pre-install hook pod (rv %d) was not created before the Deployment (rv %d)", pre, deploy)
	}
	if ready == 0 || post <= ready {
		t.Fatalf("the post-install hook pod (rv %d) was not created after the Deployment was ready (rv %d)", post, ready)
	}
	if p, err := cs.CoreV1().Pods("default").Get(context.Background(), "pre-install-hook-pod", metav1.GetOptions{}); err != nil ||
		p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the pre-install hook pod (no delete policy) is not there, Succeeded: %v", err)
	}
	if log.first(added("Pod", "pre-delete-hook-pod")) != 0 {
		t.Fatal("the pre-delete hook ran on instantiate")
	}
	// The status lists the hook that ran and stays, not the others; the
	// DIG is Ready with it.
	st := o.waitJSON(dig+"/status?status=ready", "ready", func(v map[string]any) bool { return v["ready"] == true })
	body, _ := json.Marshal(st)
	if !strings.Contains(string(body), `"pre-install-hook-pod"`) || strings.Contains(string(body), "post-install-hook-pod") ||
		strings.Contains(string(body), "pre-delete-hook-pod") {
		t.Fatalf("status lists the hooks wrongly: %s", body)
	}

	o.must(202, "POST", dig+"/terminate", nil)
	var preDelete, deployGone int64
	waitFor(t, "terminated, every hook pod gone", func() (bool, string) {
		preDelete, deployGone = log.first(added("Pod", "pre-delete-hook-pod")), log.first(deleted("Deployment", "hooked"))
		left := []string{}
		for _, name := range []string{"pre-install-hook-pod", "pre-delete-hook-pod", "post-install-hook-pod"} {
			if p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); !gone(p, err) {
				left = append(left, name)
			}
		}
		return deployGone > 0 && len(left) == 0, fmt.Sprintf("pre-delete %d deployment deleted %d, pods left %v", preDelete, deployGone, left)
	})
	if preDelete == 0 || preDelete >= deployGone {
		t.Fatalf("the pre-delete hook pod (rv %d) did not run before the Deployment was deleted (rv %d)", preDelete, deployGone)
	}
	o.waitJSON(dig+"/status", "Terminated (the bundle deleted last)", deployedStatusIs("Terminated"))
}

// TestEMCOCompat: what emcoctl and EMCO's examples still found different.
// Clusters by label, a GitOps cluster refused, unimplemented controllers
// named; a standard logical cloud whose user may not write
// ResourceBundleStates (its permissions leave out k8splugin.io) still gets
// its apps' status; a gRPC registration on a logical cloud gets its status
// at once and when it changes; the admin cloud's readiness agrees with
// itself; an unknown app filter is refused; a DIG's history starts with
// Created.
func TestEMCOCompat(t *testing.T) {
	sharedClusters(t)
	grpcAddr := testenv.FreeAddr(t)
	o := startOrchestrator(t, testenv.UniqueName("ecmp"), "/"+testenv.UniqueName("ecmp"), func(opts *orchestrator.Options) { opts.GRPCListen = grpcAddr })
	startMonitors(t, sim)
	ctx := context.Background()
	ns := testenv.UniqueName("lcr")

	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for _, c := range sim.Clusters {
		o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
		o.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+c.Name+"/labels", map[string]string{"clusterLabel": "edge"})
	}
	if got := o.must(200, "GET", "/v2/cluster-providers/cp/clusters?label=edge", nil); got != `["cluster1","cluster2"]`+"\n" {
		t.Fatalf("?label=edge: %s", got)
	}
	if code, body := o.upload("/v2/cluster-providers/cp/clusters", obj("git", map[string]any{"gitOps": map[string]any{
		"gitOpsType": "fluxv2", "gitOpsReferenceObject": "g", "gitOpsResourceObject": "g"}}), []byte("placeholder")); code != 400 || !strings.Contains(body, "GitOps clusters") {
		t.Fatalf("gitOps cluster: %d %s", code, body)
	}
	for path, controller := range map[string]string{
		emcoDIG + "/network-controller-intent": "ovnaction", emcoDIG + "/hpa-intents": "hpa-plc", emcoDIG + "/traffic-group-intents": "dtc",
		emcoDIG + "/network-chains": "sfc", emcoDIG + "/sfc-clients": "sfc-client", emcoDIG + "/temporal-workflow-intents": "workflow",
		emcoDIG + "/temporal-action-controller": "tac", emcoProject + "/ca-certs": "ca-certs",
		"/v2/cluster-providers/cp/cluster-sync-objects": "cluster-sync-objects", "/v2/cluster-providers/cp/clusters/cluster1/stop": "ncm",
	} {
		if code, body := o.call("POST", path, map[string]any{"metadata": map[string]any{"name": "x"}}); code != 501 || !strings.Contains(body, controller) {
			t.Errorf("POST %s: %d %s, want 501 naming %s", path, code, body, controller)
		}
	}

	// An admin cloud (on cluster1) and a standard cloud whose user may
	// touch the core and apps groups only.
	o.must(201, "POST", "/v2/projects", meta("proj-emco"))
	o.must(201, "POST", emcoLCs, obj("default", map[string]any{"level": "0"}))
	o.must(201, "POST", emcoLCs+"/default/cluster-references", obj("c1", map[string]any{"clusterProvider": "cp", "cluster": "cluster1"}))
	o.must(201, "POST", emcoLCs, obj("lcr", map[string]any{"namespace": ns, "user": map[string]any{"userName": "restricted", "type": "certificate"}}))
	o.must(201, "POST", emcoLCs+"/lcr/user-permissions", obj("core-and-apps", map[string]any{"namespace": ns,
		"apiGroups": []any{"", "apps"}, "resources": []any{"*"}, "verbs": []any{"*"}}))
	for _, c := range sim.Clusters {
		o.must(201, "POST", emcoLCs+"/lcr/cluster-references", obj(c.Name+"-ref", map[string]any{"clusterProvider": "cp", "cluster": c.Name}))
	}
	registered := time.Now()
	w := watchStatus(t, grpcAddr, &pb.StatusRegistration{ClientId: testenv.UniqueName("lc"), StatusType: pb.StatusValue_DEPLOYED,
		Output: pb.OutputType_SUMMARY, Key: &pb.StatusRegistration_LcKey{LcKey: &pb.LcKey{Project: "proj-emco", LogicalCloud: "lcr"}}})
	first, at := w.next(t, 0, pb.StatusValue_NOT_DEPLOYED)
	o.must(202, "POST", emcoLCs+"/default/instantiate", nil)
	asked := time.Now()
	o.must(202, "POST", emcoLCs+"/lcr/instantiate", nil)
	_, deployedAt := w.next(t, first+1, pb.StatusValue_DEPLOYED)
	t.Logf("gRPC on a logical cloud: current status %s after registering, DEPLOYED %s after the instantiate was asked for",
		at.Sub(registered).Round(time.Millisecond), deployedAt.Sub(asked).Round(time.Millisecond))
	admin := o.waitJSON(emcoLCs+"/default/status", "admin cloud Instantiated", deployedStatusIs("Instantiated"))
	if admin["readyStatus"] != "Ready" || admin["ready"] != true {
		t.Fatalf("admin cloud readiness disagrees with itself: readyStatus %v ready %v", admin["readyStatus"], admin["ready"])
	}
	kc := o.must(200, "GET", emcoLCs+"/lcr/cluster-references/cluster1-ref/kubeconfig", nil)
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	if err := kubernetes.NewForConfigOrDie(cfg).RESTClient().Get().AbsPath("/apis/k8splugin.io/v1alpha1/namespaces/" + ns + "/resourcebundlestates").Do(ctx).Error(); !apierrors.IsForbidden(err) {
		t.Fatalf("the restricted user reading ResourceBundleStates: %v, want Forbidden", err)
	}

	// A DIG in the restricted cloud: its status comes from the clusters.
	onboardWebApp(t, o, "prof", testenv.ArchiveFiles(t, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""}))
	o.must(201, "POST", emcoCA+"/deployment-intent-groups", obj("web-dig", map[string]any{"compositeProfile": "prof", "version": "r1", "logicalCloud": "lcr"}))
	o.must(201, "POST", emcoDIG+"/generic-placement-intents", meta("gpi"))
	o.must(201, "POST", emcoDIG+"/generic-placement-intents/gpi/app-intents", placementOn("web", map[string]any{"clusterProvider": "cp", "clusterLabel": "edge"}))
	o.must(201, "POST", emcoDIG+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	o.must(202, "POST", emcoDIG+"/approve", nil)
	o.must(202, "POST", emcoDIG+"/instantiate", nil)
	st := o.waitJSON(emcoDIG+"/status?status=ready", "the restricted cloud's DIG Ready", func(v map[string]any) bool {
		body, _ := json.Marshal(v)
		return v["ready"] == true && !strings.Contains(string(body), "no ResourceBundleState received yet")
	})
	if actions := st["states"].(map[string]any)["actions"].([]any); actions[0].(map[string]any)["state"] != "Created" {
		t.Fatalf("the DIG's history does not start with Created: %v", actions)
	}
	for _, c := range sim.Clusters {
		raw, err := c.Clientset().RESTClient().Get().AbsPath("/apis/k8splugin.io/v1alpha1/namespaces/" + ns + "/resourcebundlestates").DoRaw(ctx)
		if err != nil || !strings.Contains(string(raw), `"name":"web-`) {
			t.Fatalf("%s: no ResourceBundleState for the restricted cloud's app: %v %s", c.Name, err, raw)
		}
	}
	if code, body := o.call("GET", emcoDIG+"/status?app=nosuch", nil); code != 400 || !strings.Contains(body, "nosuch") {
		t.Fatalf("?app=nosuch: %d %s", code, body)
	}
	if code, body := o.call("GET", emcoDIG+"/status?app=web&status=ready", nil); code != 200 || strings.Contains(body, `"rsyncStatus"`) || !strings.Contains(body, `"clusterStatus":{"Present":`) {
		t.Fatalf("?app=web&status=ready, with EMCO's clusterStatus: %d %s", code, body)
	}
	if code, body := o.call("GET", emcoDIG+"/status", nil); code != 200 || !strings.Contains(body, `"rsyncStatus":{"Applied":4}`) || !strings.Contains(body, `"rsyncStatus":"Applied"`) {
		t.Fatalf("the default answer, with EMCO's rsyncStatus: %d %s", code, body)
	}
	o.must(202, "POST", emcoDIG+"/terminate", nil)
	o.waitJSON(emcoDIG+"/status", "the DIG Terminated", deployedStatusIs("Terminated"))
	o.must(202, "POST", emcoLCs+"/lcr/terminate", nil)
	o.must(202, "POST", emcoLCs+"/default/terminate", nil)
	w.next(t, first+1, pb.StatusValue_NOT_DEPLOYED)
}
