package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// The EMCO examples' flow (issue 16): controllers registered, an admin and
// a standard logical cloud over both clusters, a composite app deployed in
// the standard cloud with Helm --set style overrides and a GAC
// NetworkPolicy patched by cluster label, and the status answered in
// EMCO's f12558f shapes.

const (
	emcoProject = "/v2/projects/proj-emco"
	emcoCA      = emcoProject + "/composite-apps/web-app/v1"
	emcoDIG     = emcoCA + "/deployment-intent-groups/web-dig"
	emcoLCs     = emcoProject + "/logical-clouds"
)

// webChart is a chart packed from inside its folder, as EMCO's scripts do
// (`tar czf app.tgz -C chart .`: entries ./, ./Chart.yaml, ./templates/, ...).
func webChart(t *testing.T) []byte {
	return tgz.FromInside(t, map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"values.yaml": "image:\n  repository: nginx\n  tag: \"1.25\"\nservice:\n  port: 80\n",
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
      - name: web
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
        ports: [{containerPort: {{ .Values.service.port }}}]
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {app: {{ .Release.Name }}}
  ports:
  - port: {{ .Values.service.port }}
`,
	})
}

// onboardWebApp registers the composite app web-app with its one app, web
// (webChart), and the composite profile named profile holding the web
// app's profile archive.
func onboardWebApp(t *testing.T, o *orch, profile string, archive []byte) {
	t.Helper()
	o.must(201, "POST", emcoProject+"/composite-apps", obj("web-app", map[string]any{"compositeAppVersion": "v1"}))
	o.uploadOK(emcoCA+"/apps", meta("web"), webChart(t))
	o.must(201, "POST", emcoCA+"/composite-profiles", meta(profile))
	o.uploadOK(emcoCA+"/composite-profiles/"+profile+"/profiles", obj("web-profile", map[string]any{"app": "web"}), archive)
}

const netpolDB = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: netpol-db
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes: [Ingress]
`

// waitJSON polls GET path until cond holds on the decoded body (60s).
func (o *orch) waitJSON(path, what string, cond func(map[string]any) bool) map[string]any {
	o.t.Helper()
	var last string
	for start := time.Now(); time.Since(start) < 60*time.Second; time.Sleep(200 * time.Millisecond) { // polling with a deadline
		code, body := o.call("GET", path, nil)
		last = fmt.Sprintf("%d %s", code, body)
		var v map[string]any
		if code == 200 && json.Unmarshal([]byte(body), &v) == nil && cond(v) {
			return v
		}
	}
	o.t.Fatalf("%s: not true after 60s; last answer: %s", what, last)
	return nil
}

func deployedStatusIs(want string) func(map[string]any) bool {
	return func(v map[string]any) bool { return v["deployedStatus"] == want }
}

// uploadFiles posts a multipart upload with the metadata and files under
// part name (EMCO's GAC uses "file" and "files").
func (o *orch) uploadFiles(path, part string, meta any, files map[string]string) (int, string) {
	o.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mj, _ := json.Marshal(meta)
	_ = mw.WriteField("metadata", string(mj))
	for name, content := range files {
		fw, _ := mw.CreateFormFile(part, name)
		_, _ = fw.Write([]byte(content))
	}
	_ = mw.Close()
	req, _ := http.NewRequest("POST", o.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := boundedClient().Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestEMCOExampleFlow(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("emco"), "/"+testenv.UniqueName("emco"))
	startMonitors(t, sim)
	ctx := context.Background()
	ns := testenv.UniqueName("lc")

	registerControllers(t, o)

	// Clusters with a label, the first with another one (the GAC patch's),
	// a project.
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for i, c := range sim.Clusters {
		o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
		o.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+c.Name+"/labels", map[string]string{"clusterLabel": "edge"})
		if i == 0 {
			o.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+c.Name+"/labels", map[string]string{"clusterLabel": "db-zone"})
		}
	}
	o.must(201, "POST", "/v2/projects", meta("proj-emco"))

	instantiateClouds(ctx, t, o, ns)

	// The composite app: a chart packed with -C, a profile that sets nothing.
	onboardWebApp(t, o, "web-profile", testenv.ArchiveFiles(t, map[string]string{"./manifest.yaml": "version: v1\ntype:\n  values: \"override_values.yaml\"\n", "./override_values.yaml": ""}))
	o.must(201, "POST", emcoCA+"/deployment-intent-groups", obj("web-dig", map[string]any{
		"compositeProfile": "web-profile", "version": "r1", "logicalCloud": "lc1",
		"overrideValues": []any{map[string]any{"app": "web", "values": map[string]any{
			"image.repository": "registry.example/web", "service.port": "8080"}}}}))
	o.must(201, "POST", emcoDIG+"/generic-placement-intents", obj("gpi", map[string]any{"logicalCloud": "lc1"}))
	o.must(201, "POST", emcoDIG+"/generic-placement-intents/gpi/app-intents", obj("web-placement", map[string]any{
		"app": "web", "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "clusterLabel": "edge"}}}}))

	// An intent naming a controller Argus does not implement is refused.
	if code, body := o.call("POST", emcoDIG+"/intents", obj("bad", map[string]any{"intent": map[string]any{
		"genericPlacementIntent": "gpi", "dtc": "dtc-intent"}})); code != 400 || !strings.Contains(body, "dtc") {
		t.Fatalf("intent naming dtc: %d %s, want 400 naming dtc", code, body)
	}
	o.must(201, "POST", emcoDIG+"/intents", obj("intents", map[string]any{"intent": map[string]any{
		"genericPlacementIntent": "gpi", "gac": "web-gac"}}))

	addNetworkPolicyGAC(t, o)

	o.must(202, "POST", emcoDIG+"/approve", nil)
	o.must(202, "POST", emcoDIG+"/instantiate", nil)
	start := time.Now()
	o.waitJSON(emcoDIG+"/status?status=deployed", "DIG deployed", deployedStatusIs("Instantiated"))
	ready := o.waitJSON(emcoDIG+"/status?status=ready", "DIG Ready", func(v map[string]any) bool { return v["readyStatus"] == "Ready" })
	t.Logf("instantiate to readyStatus Ready in the standard cloud: %s", time.Since(start).Round(time.Millisecond))

	for i, c := range sim.Clusters {
		cs := c.Clientset()
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Spec.Template.Spec.Containers[0].Image != "registry.example/web:1.25" {
			t.Fatalf("%s: deployment in %s: %v %v", c.Name, ns, d, err)
		}
		svc, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || svc.Spec.Ports[0].Port != 8080 {
			t.Fatalf("%s: service port: %v %v", c.Name, svc, err)
		}
		// Selected by the cluster's label: only where it is.
		np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "netpol-db", metav1.GetOptions{})
		switch {
		case i != 0 && !apierrors.IsNotFound(err):
			t.Fatalf("%s (not labelled db-zone): network policy %v, %v; want none", c.Name, np.Spec.PodSelector, err)
		case i == 0 && err != nil:
			t.Fatalf("%s (labelled db-zone): network policy: %v", c.Name, err)
		case i == 0 && np.Spec.PodSelector.MatchLabels["role"] != "database":
			t.Fatalf("%s: network policy selects %v, want the patched role database", c.Name, np.Spec.PodSelector.MatchLabels)
		}
		if f := d.ManagedFields; len(f) == 0 || f[0].Manager != "argus" {
			t.Fatalf("%s: deployment not applied by argus: %v", c.Name, f)
		}
	}

	checkEMCOStatusForms(t, o, ready)

	// A cloud in use is not terminated; after the DIG, it is.
	if code, body := o.call("POST", emcoLCs+"/lc1/terminate", nil); code != 409 || !strings.Contains(body, "web-dig") {
		t.Fatalf("terminate a cloud in use: %d %s", code, body)
	}
	o.must(202, "POST", emcoDIG+"/terminate", nil)
	o.waitJSON(emcoDIG+"/status?status=deployed", "DIG Terminated", deployedStatusIs("Terminated"))
	for _, lc := range []string{"lc1", "default"} {
		o.must(202, "POST", emcoLCs+"/"+lc+"/terminate", nil)
		o.waitJSON(emcoLCs+"/"+lc+"/status", lc+" Terminated", deployedStatusIs("Terminated"))
	}
	for _, c := range sim.Clusters {
		n, err := c.Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil && n.DeletionTimestamp == nil {
			t.Fatalf("%s: namespace %s still there after terminate", c.Name, ns)
		}
	}
}

// registerControllers registers rsync and gac as 00-controllers.yaml does.
func registerControllers(t *testing.T, o *orch) {
	t.Helper()
	o.must(201, "POST", "/v2/controllers", obj("rsync", map[string]any{"host": "127.0.0.1", "port": 30431}))
	o.must(201, "POST", "/v2/controllers", obj("gac", map[string]any{"host": "127.0.0.1", "port": 30433, "type": "action", "priority": 1}))
	var ctrls []struct {
		Metadata struct{ Name string }
		Spec     struct{ Type string }
	}
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v2/controllers", nil)), &ctrls)
	if len(ctrls) != 2 || ctrls[0].Metadata.Name != "gac" || ctrls[0].Spec.Type != "action" || ctrls[1].Metadata.Name != "rsync" {
		t.Fatalf("controllers: %+v", ctrls)
	}
}

// instantiateClouds instantiates an admin cloud and a standard cloud in
// namespace ns over both clusters, and checks the standard one: its
// namespace, quota, and a kubeconfig confined to its namespace.
func instantiateClouds(ctx context.Context, t *testing.T, o *orch, ns string) {
	t.Helper()
	o.must(201, "POST", emcoLCs, obj("default", map[string]any{"level": "0"}))
	o.must(201, "POST", emcoLCs, obj("lc1", map[string]any{"namespace": ns, "labels": map[string]any{"team.example.com/name": "web"},
		"user": map[string]any{"userName": "user-1", "type": "certificate"}}))
	o.must(201, "POST", emcoLCs+"/lc1/user-permissions", obj("primary", map[string]any{"namespace": ns,
		"apiGroups": []any{"*"}, "resources": []any{"*"}, "verbs": []any{"*"}}))
	o.must(201, "POST", emcoLCs+"/lc1/cluster-quotas", obj("quota", map[string]any{"pods": "20", "count/deployments.apps": "5"}))
	for _, lc := range []string{"default", "lc1"} {
		for _, c := range sim.Clusters {
			o.must(201, "POST", emcoLCs+"/"+lc+"/cluster-references", obj(c.Name+"-ref", map[string]any{
				"clusterProvider": "cp", "cluster": c.Name, "loadbalancerIp": "0.0.0.0"}))
		}
		o.must(202, "POST", emcoLCs+"/"+lc+"/instantiate", nil)
	}
	start := time.Now()
	o.waitJSON(emcoLCs+"/default/status", "admin cloud Instantiated", deployedStatusIs("Instantiated"))
	st := o.waitJSON(emcoLCs+"/lc1/status", "standard cloud Instantiated", deployedStatusIs("Instantiated"))
	t.Logf("standard logical cloud Instantiated (resources applied, both users' certificates issued) in %s", time.Since(start).Round(time.Millisecond))
	if cl, _ := st["clusters"].([]any); len(cl) != 2 {
		t.Errorf("standard cloud status lists %d clusters: %v", len(cl), st)
	}
	for _, c := range sim.Clusters {
		n, err := c.Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil || n.Labels["team.example.com/name"] != "web" {
			t.Fatalf("%s: namespace %s: %v %v", c.Name, ns, n.Labels, err)
		}
		if q, err := c.Clientset().CoreV1().ResourceQuotas(ns).Get(ctx, "quota", metav1.GetOptions{}); err != nil || q.Spec.Hard.Pods().String() != "20" {
			t.Fatalf("%s: quota: %v", c.Name, err)
		}
	}
	// The cloud's kubeconfig is its user's: confined to its namespace.
	kc := o.must(200, "GET", emcoLCs+"/lc1/cluster-references/cluster1-ref/kubeconfig", nil)
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	user := kubernetes.NewForConfigOrDie(cfg)
	if _, err := user.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the cloud's user cannot list in its namespace: %v", err)
	}
	if _, err := user.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the cloud's user listing another namespace: %v, want Forbidden", err)
	}
}

// checkEMCOStatusForms checks the f12558f fields beside the seed ones,
// and the ?apps, ?clusters and ?resources forms of the status query.
func checkEMCOStatusForms(t *testing.T, o *orch, ready map[string]any) {
	t.Helper()
	states, _ := ready["states"].(map[string]any)
	actions, _ := states["actions"].([]any)
	dc, _ := ready["deployedCounts"].(map[string]any)
	rc, _ := ready["readyCounts"].(map[string]any)
	if len(actions) == 0 || ready["deployedStatus"] != "Instantiated" || dc["Applied"] == nil || rc["Ready"] == nil || rc["NotReady"] != nil ||
		ready["compositeApp"] != "web-app" || ready["ready"] != true {
		t.Fatalf("status fields: %v", ready)
	}
	apps := o.waitJSON(emcoDIG+"/status?apps", "?apps", func(map[string]any) bool { return true })
	if fmt.Sprint(apps["apps"]) != "[web]" {
		t.Fatalf("?apps: %v", apps)
	}
	byApp := o.waitJSON(emcoDIG+"/status?clusters&app=web", "?clusters", func(map[string]any) bool { return true })
	entries, _ := byApp["clustersByApp"].([]any)
	if len(entries) != 1 || len(entries[0].(map[string]any)["clusters"].([]any)) != 2 {
		t.Fatalf("?clusters&app=web: %v", byApp)
	}
	res := o.waitJSON(emcoDIG+"/status?resources&app=web", "?resources", func(map[string]any) bool { return true })
	rEntries, _ := res["resourcesByApp"].([]any)
	if len(rEntries) != 2 {
		t.Fatalf("?resources&app=web: %v", res)
	}
	var kinds []string
	for _, r := range rEntries[0].(map[string]any)["resources"].([]any) {
		kinds = append(kinds, r.(map[string]any)["GVK"].(map[string]any)["Kind"].(string))
	}
	sort.Strings(kinds)
	if strings.Join(kinds, ",") != "Deployment,NetworkPolicy,Service" {
		t.Fatalf("?resources kinds: %v", kinds)
	}
}

// addNetworkPolicyGAC adds a GAC intent: a new NetworkPolicy, JSON-patched,
// made by a customization scoped to the label db-zone: on the app's
// clusters that carry it (cluster1), not on the others (cluster2, edge
// only).
func addNetworkPolicyGAC(t *testing.T, o *orch) {
	t.Helper()
	o.must(201, "POST", emcoDIG+"/generic-k8s-intents", meta("web-gac"))
	if code, body := o.uploadFiles(emcoDIG+"/generic-k8s-intents/web-gac/resources", "file", obj("netpol-db", map[string]any{
		"app": "web", "newObject": "true", "resourceGVK": map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "networkpolicy", "name": "netpol-db"}}),
		map[string]string{"networkpolicy-db.yaml": netpolDB}); code != 201 {
		t.Fatalf("GAC resource: %d %s", code, body)
	}
	if code, body := o.uploadFiles(emcoDIG+"/generic-k8s-intents/web-gac/resources/netpol-db/customizations", "files", obj("netpol-db-customization", map[string]any{
		"clusterSpecific": "true",
		"clusterInfo":     map[string]any{"scope": "label", "clusterProvider": "cp", "cluster": "", "clusterLabel": "db-zone", "mode": "allow"},
		"patchType":       "json",
		"patchJson":       []any{map[string]any{"op": "replace", "path": "/spec/podSelector/matchLabels/role", "value": "database"}}}),
		map[string]string{"customization-dummy.yaml": "ignored: true\n"}); code != 201 {
		t.Fatalf("GAC customization: %d %s", code, body)
	}
}

// A standard cloud grows to a second cluster and leaves the first with
// update, as examples/dcm-advanced's update-lc.yaml does.
func TestEMCOLogicalCloudUpdate(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("emcolc"), "/"+testenv.UniqueName("emcolc"))
	ctx := context.Background()
	ns := testenv.UniqueName("lcu")
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for _, c := range sim.Clusters {
		o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
	}
	o.must(201, "POST", "/v2/projects", meta("proj-emco"))
	o.must(201, "POST", emcoLCs, obj("lc1", map[string]any{"namespace": ns, "user": map[string]any{"userName": "user-1"}}))
	o.must(201, "POST", emcoLCs+"/lc1/user-permissions", obj("primary", map[string]any{"namespace": ns,
		"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"get", "list"}}))
	ref := func(c string) map[string]any {
		return obj(c+"-ref", map[string]any{"clusterProvider": "cp", "cluster": c})
	}
	o.must(201, "POST", emcoLCs+"/lc1/cluster-references", ref("cluster1"))
	if code, body := o.call("POST", emcoLCs+"/lc1/update", nil); code != 409 {
		t.Fatalf("update before instantiate: %d %s", code, body)
	}
	o.must(202, "POST", emcoLCs+"/lc1/instantiate", nil)
	o.waitJSON(emcoLCs+"/lc1/status", "Instantiated on cluster1", deployedStatusIs("Instantiated"))

	o.must(201, "POST", emcoLCs+"/lc1/cluster-references", ref("cluster2"))
	o.must(204, "DELETE", emcoLCs+"/lc1/cluster-references/cluster1-ref", nil)
	o.must(202, "POST", emcoLCs+"/lc1/update", nil)
	st := o.waitJSON(emcoLCs+"/lc1/status", "Updated onto cluster2", deployedStatusIs("Updated"))
	if cl, _ := st["clusters"].([]any); len(cl) != 1 || cl[0].(map[string]any)["cluster"] != "cluster2" {
		t.Fatalf("clusters after update: %v", st["clusters"])
	}
	if _, err := sim.Cluster("cluster2").Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace on the added cluster: %v", err)
	}
	if n, err := sim.Cluster("cluster1").Clientset().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.DeletionTimestamp == nil {
		t.Fatal("the namespace stayed on the cluster the cloud left")
	}
	o.must(200, "GET", emcoLCs+"/lc1/cluster-references/cluster2-ref/kubeconfig", nil)
	// A cloud on its clusters cannot be deleted nor change its namespace.
	if code, _ := o.call("DELETE", emcoLCs+"/lc1", nil); code != 409 {
		t.Fatalf("delete an instantiated cloud: %d", code)
	}
	if code, _ := o.call("PUT", emcoLCs+"/lc1", obj("lc1", map[string]any{"namespace": "other", "user": map[string]any{"userName": "user-1"}})); code != 409 {
		t.Fatalf("move an instantiated cloud: %d", code)
	}
	o.must(202, "POST", emcoLCs+"/lc1/terminate", nil)
	o.waitJSON(emcoLCs+"/lc1/status", "Terminated", deployedStatusIs("Terminated"))
	if code, body := o.call("GET", emcoLCs+"/lc1/cluster-references/cluster2-ref/kubeconfig", nil); code != 409 {
		t.Fatalf("kubeconfig of a terminated cloud: %d %s", code, body)
	}
	hist := o.waitJSON(emcoLCs+"/lc1/status?status=deployed", "history", func(map[string]any) bool { return true })
	var states []string
	for _, a := range hist["states"].(map[string]any)["actions"].([]any) {
		states = append(states, a.(map[string]any)["state"].(string))
	}
	if strings.Join(states, ",") != "Instantiated,Updated,Terminated" {
		t.Fatalf("history %v", states)
	}
	o.must(204, "DELETE", emcoLCs+"/lc1/cluster-references/cluster2-ref", nil)
	o.must(204, "DELETE", emcoLCs+"/lc1/user-permissions/primary", nil)
	o.must(204, "DELETE", emcoLCs+"/lc1", nil)
}
