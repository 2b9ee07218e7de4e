package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// The k8splugin compatibility tests (issue 18) drive the v1 API with the
// bodies, in the order and with the expectations of ONAP's k8splugin
// clients (SO, CDS, the KUD scripts).

const rbInstanceLabel = "k8splugin.io/rb-instance-id"

// v1Status GETs an instance's status.
func (o *orch) v1Status(id string) status.InstanceStatus {
	o.t.Helper()
	var st status.InstanceStatus
	if err := json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance/"+id+"/status", nil)), &st); err != nil {
		o.t.Fatal(err)
	}
	return st
}

// waitV1Status polls an instance's status until cond holds (deadline 60s)
// and returns how long that took.
func (o *orch) waitV1Status(id, what string, cond func(status.InstanceStatus) (bool, string)) time.Duration {
	o.t.Helper()
	start := time.Now()
	waitFor(o.t, what, func() (bool, string) { return cond(o.v1Status(id)) })
	return time.Since(start)
}

// v1Entry finds a resource of a v1 status by kind and name prefix.
func v1Entry(st status.InstanceStatus, kind, namePrefix string) *status.ResourceStatus {
	for i, r := range st.ResourcesStatus {
		if r.GVK.Kind == kind && strings.HasPrefix(r.Name, namePrefix) {
			return &st.ResourcesStatus[i]
		}
	}
	return nil
}

func describeV1(st status.InstanceStatus) string {
	var parts []string
	for _, r := range st.ResourcesStatus {
		parts = append(parts, fmt.Sprintf("%s/%s=%s(%s)", r.GVK.Kind, r.Name, r.ReadyStatus, r.Reason))
	}
	return fmt.Sprintf("ready=%v %s", st.Ready, strings.Join(parts, " "))
}

// waitCluster polls a cluster read until it returns nil (deadline 60s).
func waitCluster(t *testing.T, what string, f func() error) {
	t.Helper()
	waitFor(t, what, func() (bool, string) { err := f(); return err == nil, fmt.Sprint(err) })
}

func TestK8spluginCompatibility(t *testing.T) {
	sharedClusters(t)
	startMonitors(t, sim)
	o := startOrchestrator(t, testenv.UniqueName("k8sp"), "/"+testenv.UniqueName("k8sp"), func(opts *orchestrator.Options) {
		opts.CallbackAllow = []string{"127.0.0.0/8"} // the test's receiver
	})
	cl := sim.Cluster("cluster1")
	cs := cl.Clientset()
	ctx := context.Background()

	if code, body := o.call("GET", "/v1/healthcheck", nil); code != 200 {
		t.Fatalf("GET /v1/healthcheck: %d %s", code, body)
	}

	checkConnectivityInfo(t, o, cl.Kubeconfig)

	// A definition whose chart has a PersistentVolume, a ClusterRole and a
	// Deployment; the chart name comes from the archive; "default" exists.
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "pvapp", "rb-version": "v1",
		"description": "k8splugin compatibility", "labels": map[string]string{"vnf_customization_uuid": "u1"}})
	o.must(200, "POST", "/v1/rb/definition/pvapp/v1/content", testenv.Archive(t, filepath.Join("testdata/charts", "pvapp")))
	if def := o.must(200, "GET", "/v1/rb/definition/pvapp/v1", nil); !strings.Contains(def, `"chart-name":"pvapp"`) {
		t.Fatalf("chart name not taken from the archive: %s", def)
	}
	var dflt catalog.RBProfileSpec
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/rb/definition/pvapp/v1/profile/default", nil)), &dflt)
	if dflt.Namespace != "default" || dflt.ReleaseName != "default" {
		t.Fatalf("default profile = %+v", dflt)
	}
	o.must(201, "POST", "/v1/rb/definition/pvapp/v1/profile", map[string]any{"profile-name": "p1", "rb-name": "pvapp",
		"rb-version": "v1", "release-name": "pvrel", "namespace": "k8sp", "kubernetes-version": "1.34"})

	// An instance with --set style overrides.
	body := o.must(201, "POST", "/v1/instance", map[string]any{"cloud-region": "kud", "rb-name": "pvapp", "rb-version": "v1",
		"profile-name": "p1", "labels": map[string]string{"tenant": "t1"},
		"override-values": map[string]string{"image.repository": "registry.example/nginx", "image.tag": "1.27"}})
	var inst catalog.InstanceSpec
	if err := json.Unmarshal([]byte(body), &inst); err != nil {
		t.Fatal(err)
	}
	if inst.ID == "" || inst.Namespace != "k8sp" || inst.ReleaseName != "pvrel" || len(inst.Resources) != 5 {
		t.Fatalf("create answer: %s", body)
	}
	id := inst.ID
	took := o.waitV1Status(id, "instance ready, the cluster-scoped objects included", func(st status.InstanceStatus) (bool, string) {
		ready := 0
		for _, e := range []*status.ResourceStatus{v1Entry(st, "PersistentVolume", "pvrel-data-"), v1Entry(st, "ClusterRole", "pvrel-reader-"),
			v1Entry(st, "CustomResourceDefinition", "gadgets."), v1Entry(st, "Gadget", "pvrel-gadget-"), v1Entry(st, "Pod", "pvrel-")} {
			if e != nil && e.ReadyStatus == "Ready" {
				ready++
			}
		}
		return st.Ready && ready == 5, describeV1(st)
	})
	t.Logf("create to v1 status ready (PV, ClusterRole, CRD, cluster-scoped custom object, Deployment, Pod): %s", took.Round(time.Millisecond))

	checkPVAppOnCluster(ctx, t, cs, id)

	checkV1Reads(t, o, id)

	checkUpgradeIsNotified(ctx, t, o, cs, id)

	testConfigAPI(t, o, id)
	testLackingKind(t, o)

	// Teardown in k8splugin's order.
	o.must(202, "DELETE", "/v1/instance/"+id, nil)
	o.must(404, "GET", "/v1/instance/"+id, nil)
	o.must(204, "DELETE", "/v1/rb/definition/pvapp/v1", nil)
	o.must(404, "GET", "/v1/rb/definition/pvapp/v1", nil)
	o.must(404, "GET", "/v1/rb/definition/pvapp/v1/profile/default", nil)
	o.must(404, "GET", "/v1/rb/definition/pvapp/v1/profile/p1", nil)
	o.must(204, "DELETE", "/v1/rb/definition/pvapp/v1/profile/p1", nil) // gone already: k8splugin answers 204 too
	o.must(204, "DELETE", "/v1/connectivity-info/kud", nil)
	o.must(404, "GET", "/v1/connectivity-info/kud", nil)
	if d, err := cs.AppsV1().Deployments("k8sp").Get(ctx, "pvrel", metav1.GetOptions{}); err == nil && d.DeletionTimestamp == nil {
		t.Fatal("the deployment survived the instance")
	}
	if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pvrel-data-"+id, metav1.GetOptions{}); err == nil {
		t.Fatal("the persistent volume survived the instance")
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "pvrel-reader-"+id, metav1.GetOptions{}); err == nil {
		t.Fatal("the cluster role survived the instance")
	}
}

// checkConnectivityInfo stores connectivity info with an
// other-connectivity-list: GET returns it all, the kubeconfig
// base64-encoded as k8splugin does.
func checkConnectivityInfo(t *testing.T, o *orch, kubeconfig []byte) {
	t.Helper()
	records := []map[string]string{{"connectivity-record-name": "ovn-central", "FQDN-or-ip": "ovn.example", "ssl-initiator": "false"}}
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "kud", "cloud-owner": "test_owner",
		"other-connectivity-list": map[string]any{"connectivity-records": records}}, kubeconfig); code != 201 {
		t.Fatalf("connectivity-info: %d %s", code, body)
	}
	var conn struct {
		CloudRegion string `json:"cloud-region"`
		CloudOwner  string `json:"cloud-owner"`
		Kubeconfig  string `json:"kubeconfig"`
		Other       struct {
			Records []map[string]string `json:"connectivity-records"`
		} `json:"other-connectivity-list"`
	}
	if err := json.Unmarshal([]byte(o.must(200, "GET", "/v1/connectivity-info/kud", nil)), &conn); err != nil {
		t.Fatal(err)
	}
	kc, _ := base64.StdEncoding.DecodeString(conn.Kubeconfig)
	if conn.CloudRegion != "kud" || conn.CloudOwner != "test_owner" || string(kc) != string(kubeconfig) ||
		len(conn.Other.Records) != 1 || conn.Other.Records[0]["FQDN-or-ip"] != "ovn.example" {
		t.Fatalf("GET connectivity-info = %+v", conn)
	}
}

// checkPVAppOnCluster checks the instance's objects on the cluster: the
// overridden image, and k8splugin's instance label on each.
func checkPVAppOnCluster(ctx context.Context, t *testing.T, cs kubernetes.Interface, id string) {
	t.Helper()
	d, err := cs.AppsV1().Deployments("k8sp").Get(ctx, "pvrel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.example/nginx:1.27" {
		t.Fatalf("deployment image = %s", img)
	}
	if d.Labels[rbInstanceLabel] != id || d.Spec.Template.Labels[rbInstanceLabel] != id {
		t.Fatalf("k8splugin's label: deployment %v, pod template %v", d.Labels, d.Spec.Template.Labels)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pvrel-data-"+id, metav1.GetOptions{})
	if err != nil || pv.Labels[rbInstanceLabel] != id {
		t.Fatalf("persistent volume: %v %v", pv, err)
	}
	pods, err := cs.CoreV1().Pods("k8sp").List(ctx, metav1.ListOptions{LabelSelector: rbInstanceLabel + "=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods by k8splugin's label: %v %v", pods, err)
	}
}

// checkV1Reads checks k8splugin's GET shapes (?full=true with its status,
// lists without resources, filtered) and its queries, which read the
// cluster as k8splugin's do.
func checkV1Reads(t *testing.T, o *orch, id string) {
	t.Helper()
	var full deploy.FullInstance
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance/"+id+"?full=true", nil)), &full)
	if full.Status != "DONE" || full.ID != id || len(full.Resources) != 5 || full.PostInstallTimeout != 600 {
		t.Fatalf("full instance = %+v", full)
	}
	list := o.must(200, "GET", "/v1/instance?rb-name=pvapp&rb-version=v1&profile-name=p1", nil)
	if !strings.Contains(list, id) || strings.Contains(list, `"resources"`) {
		t.Fatalf("filtered list: %s", list)
	}
	if list := o.must(200, "GET", "/v1/instance?profile-name=other", nil); list != "[]\n" {
		t.Fatalf("list filtered to nothing: %s", list)
	}

	// Queries read the cluster, as k8splugin's do.
	var q status.InstanceStatus
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance/"+id+"/query?ApiVersion=v1&Kind=Pod", nil)), &q)
	if q.ResourceCount != 1 || q.ResourcesStatus[0].GVK.Kind != "Pod" || !strings.Contains(string(q.ResourcesStatus[0].Status), `"phase":"Running"`) {
		t.Fatalf("instance query: %+v", q)
	}
	o.must(400, "GET", "/v1/instance/"+id+"/query?Kind=Pod", nil)
	var rq status.QueryStatus
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/query?CloudRegion=kud&Namespace=k8sp&ApiVersion=apps/v1&Kind=Deployment&Labels="+
		url.QueryEscape(rbInstanceLabel+"="+id), nil)), &rq)
	if rq.ResourceCount != 1 || rq.ResourcesStatus[0].Name != "pvrel" {
		t.Fatalf("region query: %+v", rq)
	}
}

// checkUpgradeIsNotified subscribes to the instance (its fields have
// k8splugin's types), upgrades it with k8splugin's body (no release name)
// and waits for the new image, the notification and its recorded answer.
func checkUpgradeIsNotified(ctx context.Context, t *testing.T, o *orch, cs kubernetes.Interface, id string) {
	t.Helper()
	// A status subscription's fields have k8splugin's types.
	hook := newHook(t, "ok")
	var sub struct {
		Name             string    `json:"name"`
		LastUpdateTime   time.Time `json:"last-update-time"`
		LastNotifyTime   time.Time `json:"last-notify-time"`
		LastNotifyStatus int32     `json:"last-notify-status"`
	}
	if err := json.Unmarshal([]byte(o.must(201, "POST", "/v1/instance/"+id+"/status/subscription",
		map[string]any{"name": "so", "callback-url": hook.url(), "min-notify-interval": 0, "metadata": map[string]any{}})), &sub); err != nil {
		t.Fatalf("subscription fields: %v", err)
	}
	if sub.Name != "so" || sub.LastUpdateTime.IsZero() || sub.LastNotifyStatus != 0 {
		t.Fatalf("subscription = %+v", sub)
	}

	// Upgrade with k8splugin's body (no release name) changes the image.
	beforeUpgrade := len(mustPosts(hook))
	o.must(201, "POST", "/v1/instance/"+id+"/upgrade", map[string]any{"cloud-region": "kud", "rb-name": "pvapp", "rb-version": "v1",
		"profile-name": "p1", "labels": map[string]string{"tenant": "t1"},
		"override-values": map[string]string{"image.repository": "registry.example/nginx", "image.tag": "1.28"}})
	waitCluster(t, "the upgrade's image", func() error {
		d, err := cs.AppsV1().Deployments("k8sp").Get(ctx, "pvrel", metav1.GetOptions{})
		if err == nil && d.Spec.Template.Spec.Containers[0].Image != "registry.example/nginx:1.28" {
			err = fmt.Errorf("image %s", d.Spec.Template.Spec.Containers[0].Image)
		}
		return err
	})
	o.waitV1Status(id, "ready after the upgrade", func(st status.InstanceStatus) (bool, string) { return st.Ready, describeV1(st) })
	// The callback about the upgrade: after it, for this instance, a
	// Deployment or Pod carrying the upgrade's image.
	hook.waitPost(beforeUpgrade, "about the upgrade", func(p post) bool {
		return p.doc.InstanceID == id && (carries(entry(p.doc.Changes.Modified, "Deployment", "kud", "pvrel"), "registry.example/nginx:1.28") ||
			carries(entry(p.doc.Changes.Created, "Pod", "kud", "pvrel"), "registry.example/nginx:1.28"))
	})
	waitFor(t, "the answer recorded", func() (bool, string) { // it is recorded after it came
		_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance/"+id+"/status/subscription/so", nil)), &sub)
		return sub.LastNotifyStatus == 204 && !sub.LastNotifyTime.Before(sub.LastUpdateTime), fmt.Sprintf("%+v", sub)
	})
}

// carries reports whether a change entry's JSON holds s.
func carries(e map[string]any, s string) bool {
	b, err := json.Marshal(e)
	return e != nil && err == nil && strings.Contains(string(b), s)
}

// testConfigAPI drives /v1/instance/{id}/config as k8splugin's clients do:
// each change is an update of the instance through rsync.
func testConfigAPI(t *testing.T, o *orch, id string) {
	cs := sim.Cluster("cluster1").Clientset()
	ctx := context.Background()
	base := "/v1/rb/definition/pvapp/v1/config-template"
	o.must(201, "POST", base, map[string]any{"template-name": "extra", "description": "an extra ConfigMap"})
	o.must(200, "POST", base+"/extra/content", testenv.Archive(t, filepath.Join("testdata/charts", "cfgextra")))
	if tpl := o.must(200, "GET", base+"/extra", nil); !strings.Contains(tpl, `"has-content":true`) || !strings.Contains(tpl, `"chart-name":"cfgextra"`) {
		t.Fatalf("template: %s", tpl)
	}
	greeting := func(want string) {
		t.Helper()
		waitCluster(t, "config map greeting "+want, func() error {
			cm, err := cs.CoreV1().ConfigMaps("k8sp").Get(ctx, "pvrel-extra", metav1.GetOptions{})
			switch {
			case want == "" && err == nil && cm.DeletionTimestamp == nil:
				return fmt.Errorf("still there: %v", cm.Data)
			case want == "":
				return nil
			case err != nil:
				return err
			case cm.Data["greeting"] != want || cm.Labels[rbInstanceLabel] != id:
				return fmt.Errorf("data %v labels %v", cm.Data, cm.Labels)
			}
			return nil
		})
	}
	cfg := "/v1/instance/" + id + "/config"
	res := o.must(201, "POST", cfg, map[string]any{"config-name": "c1", "template-name": "extra", "values": map[string]any{"greeting": "one"}})
	if !strings.Contains(res, `"config-version":1`) || !strings.Contains(res, `"instance-id":"`+id+`"`) {
		t.Fatalf("config create: %s", res)
	}
	greeting("one")
	o.must(200, "POST", cfg+"/c1/tagit", map[string]any{"tag-name": "first"})
	if res := o.must(201, "PUT", cfg+"/c1", map[string]any{"template-name": "extra", "values": map[string]any{"greeting": "two"}}); !strings.Contains(res, `"config-version":2`) {
		t.Fatalf("config update: %s", res)
	}
	greeting("two")
	if v := o.must(200, "GET", cfg+"/c1/version/1", nil); !strings.Contains(v, `"greeting":"one"`) || !strings.Contains(v, `"config-tag":"first"`) {
		t.Fatalf("version 1: %s", v)
	}
	if tags := o.must(200, "GET", cfg+"/c1/tag", nil); !strings.Contains(tags, `{"config-version":1,"config-tag":"first"}`) {
		t.Fatalf("tags: %s", tags)
	}
	// Rollback with the body k8splugin's handler decodes (and CDS sends).
	if res := o.must(200, "POST", cfg+"/c1/rollback", map[string]any{"config-tag": "first"}); !strings.Contains(res, `"config-version":1`) {
		t.Fatalf("rollback: %s", res)
	}
	greeting("one")
	o.waitV1Status(id, "ready with the config", func(st status.InstanceStatus) (bool, string) {
		return st.Ready && v1Entry(st, "ConfigMap", "pvrel-extra") != nil, describeV1(st)
	})
	if res := o.must(200, "POST", cfg+"/c1/delete", nil); !strings.Contains(res, `"config-version":2`) {
		t.Fatalf("config delete: %s", res)
	}
	greeting("")
	if l := o.must(200, "GET", cfg, nil); !strings.Contains(l, `"config-name":"c1"`) {
		t.Fatalf("a deleted config is still listed, with its history: %s", l)
	}
	o.must(200, "POST", cfg+"/c1/rollback", map[string]any{"config-version": "1"})
	greeting("one")
	o.must(202, "DELETE", cfg+"/c1", nil)
	greeting("")
	o.must(404, "GET", cfg+"/c1", nil)
	o.must(400, "POST", cfg, map[string]any{"config-name": "c2"})
	o.must(404, "POST", cfg, map[string]any{"config-name": "c2", "template-name": "nope"})
}

// testLackingKind creates an instance whose chart has a kind the cluster
// does not serve: through v1, the Widget waits for its CRD (NotPresent,
// naming the kind) while the rest is Ready, and the instance is still
// being created (rsync applies the Widget once the CRD exists).
func testLackingKind(t *testing.T, o *orch) {
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "lacks", "rb-version": "v1"})
	o.must(200, "POST", "/v1/rb/definition/lacks/v1/content", testenv.Archive(t, filepath.Join("testdata/charts", "lackskind")))
	var inst catalog.InstanceSpec
	_ = json.Unmarshal([]byte(o.must(201, "POST", "/v1/instance", map[string]any{"cloud-region": "kud", "rb-name": "lacks",
		"rb-version": "v1", "profile-name": "default", "release-name": "lacks"})), &inst)
	took := o.waitV1Status(inst.ID, "the missing kind's failure", func(st status.InstanceStatus) (bool, string) {
		w, cm := v1Entry(st, "Widget", "lacks-widget"), v1Entry(st, "ConfigMap", "lacks-settings")
		return !st.Ready && w != nil && w.ReadyStatus == "NotPresent" && strings.Contains(w.Reason, "widgets.example.com/v1 Widget is not served") &&
			cm != nil && cm.ReadyStatus == "Ready", describeV1(st)
	})
	t.Logf("create to the missing kind shown in v1 status: %s", took.Round(time.Millisecond))
	var full deploy.FullInstance
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance/"+inst.ID+"?full=true", nil)), &full)
	if full.Status != "CREATING" {
		t.Fatalf("full status = %s", full.Status)
	}
	o.must(202, "DELETE", "/v1/instance/"+inst.ID, nil)
	o.must(204, "DELETE", "/v1/rb/definition/lacks/v1", nil)
}
