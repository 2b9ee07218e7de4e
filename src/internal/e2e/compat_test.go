package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/catalog"
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
		"bad/templates/all.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: bad-config}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  selector: {matchLabels: {app: bad}}
  template:
    metadata: {labels: {app: bad}}
    spec: {containers: [{name: main, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: bad}
spec:
  selector: {app: bad}
  ports: [{port: 70000}]
`}))
	o.must(201, "POST", "/v1/rb/definition/bad/v1/profile", map[string]any{"rb-name": "bad", "rb-version": "v1",
		"profile-name": "p", "release-name": "bad", "namespace": ns})
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
