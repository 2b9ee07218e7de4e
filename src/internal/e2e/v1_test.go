package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
)

func TestV1InstanceLifecycle(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("v1"), "/"+testenv.UniqueName("v1"))
	cl := sim.Cluster("cluster1")
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "region1", "cloud-owner": "owner1"}, cl.Kubeconfig); code != 201 {
		t.Fatalf("connectivity-info: %d %s", code, body)
	}
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "web", "rb-version": "v1", "chart-name": "frontend", "description": "d", "labels": map[string]string{}})
	o.must(200, "POST", "/v1/rb/definition/web/v1/content", testenv.Archive(t, filepath.Join("testdata/charts", "frontend")))
	o.must(201, "POST", "/v1/rb/definition/web/v1/profile", map[string]any{"profile-name": "p1", "release-name": "fw", "namespace": "v1test"})
	o.must(200, "POST", "/v1/rb/definition/web/v1/profile/p1/content", testenv.ArchiveFiles(t, map[string]string{
		"manifest.yaml": "version: v1\ntype:\n  values: values.yaml\n", "values.yaml": "message: from-v1-profile\n"}))

	body := o.must(201, "POST", "/v1/instance", map[string]any{"rb-name": "web", "rb-version": "v1", "profile-name": "p1",
		"cloud-region": "region1", "override-values": map[string]string{"replicaCount": "1"}})
	var inst catalog.InstanceSpec
	if err := json.Unmarshal([]byte(body), &inst); err != nil {
		t.Fatal(err)
	}
	if inst.ID == "" || inst.Namespace != "v1test" || inst.ReleaseName != "fw" || len(inst.Resources) != 3 {
		t.Fatalf("instance = %s", body)
	}
	o.waitContext(inst.ID, "instance Applied", allResources(appcontext.RsyncApplied))
	got := o.must(200, "GET", "/v1/instance/"+inst.ID, nil)
	for _, want := range []string{`"Kind":"Deployment"`, `"Name":"fw"`, `"Kind":"ConfigMap"`, `"Name":"fw-config"`, `"Kind":"Service"`} {
		if !strings.Contains(got, want) {
			t.Fatalf("GET instance lacks %s: %s", want, got)
		}
	}
	if list := o.must(200, "GET", "/v1/instance?rb-name=web&profile-name=p1", nil); !strings.Contains(list, inst.ID) {
		t.Fatalf("filtered list lacks the instance: %s", list)
	}
	if list := o.must(200, "GET", "/v1/instance?rb-name=other", nil); list != "[]\n" {
		t.Fatalf("filter other: %s", list)
	}

	cs := cl.Clientset()
	ctx := context.Background()
	var podName string
	deadline := time.Now().Add(60 * time.Second)
	for podName == "" && time.Now().Before(deadline) {
		pods, err := cs.CoreV1().Pods("v1test").List(ctx, metav1.ListOptions{LabelSelector: "emco/deployment-id=" + inst.ID + "-fw"})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == "Running" {
			podName = pods.Items[0].Name
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	if podName == "" {
		t.Fatal("the instance's pod, labelled with its deployment id, never ran")
	}
	checkArgusInstance(t, o, inst.ID, podName)
	cm, err := cs.CoreV1().ConfigMaps("v1test").Get(ctx, "fw-config", metav1.GetOptions{})
	if err != nil || cm.Data["message"] != "from-v1-profile" {
		t.Fatalf("profile values: %v %v", cm, err)
	}

	// In use: the cloud region cannot go while the instance exists.
	if code, b := o.call("DELETE", "/v1/connectivity-info/region1", nil); code != 409 {
		t.Fatalf("delete a cloud region in use: %d %s", code, b)
	}

	// Upgrade a value: the Deployment changes in place, its pod keeps running
	// with the same labels.
	o.must(201, "POST", "/v1/instance/"+inst.ID+"/upgrade", map[string]any{"rb-name": "web", "rb-version": "v1", "profile-name": "p1",
		"cloud-region": "region1", "override-values": map[string]string{"replicaCount": "2"}})
	o.waitContext(inst.ID, "upgrade done", func(c *appcontext.Context) (bool, string) {
		return c.Status.Status == appcontext.Updated, c.Status.Status
	})
	d, err := cs.AppsV1().Deployments("v1test").Get(ctx, "fw", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 2 || d.Labels["emco/deployment-id"] != inst.ID+"-fw" {
		t.Fatalf("after upgrade: %v %v", d, err)
	}
	pod, err := cs.CoreV1().Pods("v1test").Get(ctx, podName, metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp != nil || pod.Labels["emco/deployment-id"] != inst.ID+"-fw" {
		t.Fatalf("the pod was replaced or relabelled by the upgrade: %v %v", pod, err)
	}

	o.must(202, "DELETE", "/v1/instance/"+inst.ID, nil)
	o.waitContext(inst.ID, "instance deleted", allResources(appcontext.RsyncDeleted))
	if _, err := cs.AppsV1().Deployments("v1test").Get(ctx, "fw", metav1.GetOptions{}); err == nil {
		d, _ := cs.AppsV1().Deployments("v1test").Get(ctx, "fw", metav1.GetOptions{})
		if d.DeletionTimestamp == nil {
			t.Fatal("the deployment survived DELETE")
		}
	}
	o.must(404, "GET", "/v1/instance/"+inst.ID, nil)
	o.must(204, "DELETE", "/v1/rb/definition/web/v1/profile/p1", nil)
	o.must(204, "DELETE", "/v1/rb/definition/web/v1", nil)

	checkV1BadInput(t, o)
}

// checkV1BadInput checks what a v1 client sending bad input is answered.
func checkV1BadInput(t *testing.T, o *orch) {
	for _, c := range []struct {
		code int
		body any
		want string
	}{
		{400, map[string]any{"rb-name": "web"}, "missing"},
		{404, map[string]any{"rb-name": "nope", "rb-version": "v1", "profile-name": "p1", "cloud-region": "region1"}, "not found"},
		{422, []byte(`{"rb-name":`), "decode"},
	} {
		if code, b := o.call("POST", "/v1/instance", c.body); code != c.code || !strings.Contains(b, c.want) {
			t.Errorf("POST /v1/instance %v: %d %s, want %d %q", c.body, code, b, c.code, c.want)
		}
	}
	if code, b := o.call("POST", "/v1/rb/definition", map[string]any{"rb-name": "x", "rb-version": "v1"}); code != 201 {
		t.Fatalf("definition: %d %s", code, b)
	}
	if code, b := o.call("POST", "/v1/rb/definition/x/v1/content", []byte("not a chart")); code != 400 {
		t.Errorf("corrupt content: %d %s", code, b)
	}
}
