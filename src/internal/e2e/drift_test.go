package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// Issue 24: desired against live. The vfw DIG on edge01 and edge02: a
// ConfigMap deleted by hand is Missing and comes back with a sync; an
// image patched by hand is OutOfSync and self-heal restores it; a second
// DIG never takes the first's object over, nor one made by hand unless
// it adopts it.

// measure polls cond (every 50 ms, 60 s at most) and returns how long it
// took to hold.
func measure(t *testing.T, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, what, cond)
	return time.Since(start)
}

// digStatus GETs a DIG's status answer (query without the "?").
func (o *orch) digStatus(dig, query string) status.Response {
	o.t.Helper()
	var r status.Response
	if err := json.Unmarshal([]byte(o.must(200, "GET", dig+"/status?"+query, nil)), &r); err != nil {
		o.t.Fatal(err)
	}
	return r
}

// resourceOf finds one resource of a status answer.
func resourceOf(r status.Response, app, cluster, kind, name string) *status.Resource {
	for _, a := range r.Apps {
		for _, c := range a.Clusters {
			for i, res := range c.Resources {
				if a.Name == app && c.Cluster == cluster && res.GVK.Kind == kind && res.Name == name {
					return &c.Resources[i]
				}
			}
		}
	}
	return nil
}

// syncOf waits-friendly: the sync state of one resource, with its reason.
func (o *orch) syncOf(dig, app, cluster, kind, name string) (string, string) {
	r := resourceOf(o.digStatus(dig, "app="+app), app, cluster, kind, name)
	if r == nil {
		return "", "not listed"
	}
	return r.SyncStatus, r.SyncReason
}

// allSynced holds when the default answer counts n resources, all Synced.
func (o *orch) allSynced(dig string, n int) func() (bool, string) {
	return func() (bool, string) {
		r := o.digStatus(dig, "")
		return r.SyncCounts["Synced"] == n && len(r.SyncCounts) == 1, fmt.Sprintf("syncCounts %v", r.SyncCounts)
	}
}

// historyOf reads a subject's history.
func (o *orch) historyOf(statusURL string) []history.Entry {
	o.t.Helper()
	var h struct {
		History []history.Entry `json:"history"`
	}
	if err := json.Unmarshal([]byte(o.must(200, "GET", statusURL+"/history", nil)), &h); err != nil {
		o.t.Fatal(err)
	}
	return h.History
}

// findEntry is the first history entry of kind about the named resource.
func findEntry(l []history.Entry, kind, name string) *history.Entry {
	for i, e := range l {
		if e.Kind == kind && e.Resource != nil && e.Resource.Name == name {
			return &l[i]
		}
	}
	return nil
}

// oneAppDIG adds a composite app of one app (chart given) to the vfw
// project with a DIG placing it on edge01.
func oneAppDIG(t *testing.T, o *orch, ca, app string, chart []byte) string {
	caPath := vfwProject + "/composite-apps/" + ca + "/v1"
	dig := caPath + "/deployment-intent-groups/" + ca + "-dig"
	o.must(201, "POST", vfwProject+"/composite-apps", obj(ca, map[string]any{"compositeAppVersion": "v1"}))
	o.must(201, "POST", caPath+"/composite-profiles", meta("profile"))
	o.uploadOK(caPath+"/apps", meta(app), chart)
	o.uploadOK(caPath+"/composite-profiles/profile/profiles", obj(app+"-profile", map[string]any{"app": app}),
		testenv.ArchiveFiles(t, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""}))
	o.must(201, "POST", caPath+"/deployment-intent-groups", obj(ca+"-dig", map[string]any{"compositeProfile": "profile", "version": "r1"}))
	o.must(201, "POST", dig+"/generic-placement-intents", meta("gpi"))
	o.must(201, "POST", dig+"/generic-placement-intents/gpi/app-intents", placementOn(app, map[string]any{"clusterProvider": "vfw-cp", "cluster": "edge01"}))
	o.must(201, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	o.must(202, "POST", dig+"/approve", nil)
	return dig
}

// configMapChart renders one ConfigMap.
func configMapChart(t *testing.T, app, name, version string) []byte {
	return tgz.FromInside(t, map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: " + app + "\nversion: 0.1.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  version: " + version + "\n",
	})
}

func configMap(t *testing.T, cluster, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := edge(cluster).Clientset().CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func sinkImage(t *testing.T, cluster string) string {
	t.Helper()
	d, err := edge(cluster).Clientset().AppsV1().Deployments("default").Get(context.Background(), "sink", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// patchSinkImage changes the sink's image by hand (a strategic merge
// patch, as kubectl set image does).
func patchSinkImage(t *testing.T, cluster, image string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"main","image":%q}]}}}}`, image)
	if _, err := edge(cluster).Clientset().AppsV1().Deployments("default").Patch(context.Background(), "sink", types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{FieldManager: "e2e-by-hand"}); err != nil {
		t.Fatal(err)
	}
}

func TestDriftSyncSelfHealAndOwnership(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("drift"), "/"+testenv.UniqueName("drift"))
	startMonitors(t, sim)
	onboardVFW(t, o)
	o.must(202, "POST", vfwDIG+"/approve", nil)
	o.must(202, "POST", vfwDIG+"/instantiate", nil)
	const total = 18 // 3 apps × (Deployment, Service, ConfigMap) × 2 clusters
	took := measure(t, "vfw all Synced", o.allSynced(vfwDIG, total))
	t.Logf("instantiate: every resource Synced %s after the 202", took.Round(time.Millisecond))
	// The contract: syncCounts at the top, a sync state per resource.
	var raw map[string]any
	_ = json.Unmarshal([]byte(o.must(200, "GET", vfwDIG+"/status", nil)), &raw)
	if _, ok := raw["syncCounts"].(map[string]any); !ok {
		t.Fatalf("no syncCounts at the top of the default answer: %v", raw)
	}

	driftMissingAndSync(t, o, total)
	driftSelfHeal(t, o, total)
	t.Run("another DIG never takes the object over", func(t *testing.T) { driftOwnership(t, o) })
	t.Run("an object made by hand is adopted only when asked", func(t *testing.T) { driftAdoption(t, o) })
	o.must(202, "POST", vfwDIG+"/terminate", nil)
	o.waitJSON(vfwDIG+"/status", "vfw terminated", deployedStatusIs("Terminated"))
}

// driftMissingAndSync: firewall-config deleted on edge01 is Missing; a
// sync brings it back with its data, and says so in the history.
func driftMissingAndSync(t *testing.T, o *orch, total int) {
	if err := edge("edge01").Clientset().CoreV1().ConfigMaps("default").Delete(context.Background(), "firewall-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := measure(t, "firewall-config Missing", func() (bool, string) {
		st, why := o.syncOf(vfwDIG, "firewall", "edge01", "ConfigMap", "firewall-config")
		return st == "Missing", st + ": " + why
	})
	t.Logf("firewall-config deleted on edge01: Missing after %s (target 5 s)", took.Round(time.Millisecond))
	if n := o.digStatus(vfwDIG, "sync=Missing&output=summary").SyncCounts["Missing"]; n != 1 {
		t.Fatalf("?sync=Missing counts %d", n)
	}
	code, body := o.call("POST", vfwDIG+"/sync", nil)
	var res deploy.SyncResult
	if err := json.Unmarshal([]byte(body), &res); code != 202 || err != nil || len(res.Resources) != 1 ||
		res.Resources[0].Name != "firewall-config" || res.Resources[0].SyncStatus != "Missing" {
		t.Fatalf("POST sync: %d %s, want 202 naming firewall-config", code, body)
	}
	asked := time.Now()
	waitFor(t, "firewall-config back", func() (bool, string) {
		cm := configMap(t, "edge01", "firewall-config")
		return cm != nil && cm.Data["version"] == "one", fmt.Sprint(cm)
	})
	back := time.Since(asked)
	waitFor(t, "all Synced after the sync", o.allSynced(vfwDIG, total))
	t.Logf("POST sync: the ConfigMap back with its data %s after the 202, syncCounts all Synced after %s (target 10 s)",
		back.Round(time.Millisecond), time.Since(asked).Round(time.Millisecond))
	waitFor(t, "a heal in the history", func() (bool, string) {
		e := findEntry(o.historyOf(vfwDIG+"/status"), history.KindHeal, "firewall-config")
		return e != nil && e.By == "sync" && e.Cluster == "edge01", fmt.Sprint(e)
	})
	// Nothing drifted: a sync answers 202 with nothing to touch.
	if body := o.must(202, "POST", vfwDIG+"/sync?app=sink", []byte(`{"metadata":{}}`)); !strings.Contains(body, `"resources":[]`) {
		t.Fatalf("sync with nothing drifted: %s", body)
	}

}

// driftSelfHeal: the sink's image patched by hand on edge02 is OutOfSync;
// self-heal, switched on by a PUT (no update), restores it, and again
// when it is patched once more.
func driftSelfHeal(t *testing.T, o *orch, total int) {
	patchSinkImage(t, "edge02", "busybox:1.37")
	took := measure(t, "sink OutOfSync", func() (bool, string) {
		st, why := o.syncOf(vfwDIG, "sink", "edge02", "Deployment", "sink")
		return st == "OutOfSync", st + ": " + why
	})
	t.Logf("sink image patched on edge02: OutOfSync after %s (target 5 s)", took.Round(time.Millisecond))
	if sinkImage(t, "edge02") != "busybox:1.37" {
		t.Fatal("the image was restored without self-heal")
	}
	o.must(200, "PUT", vfwDIG, obj("vfw-dig", map[string]any{"compositeProfile": "vfw-profile", "version": "r1",
		"syncPolicy": map[string]any{"selfHeal": true}}))
	took = measure(t, "image restored by self-heal", func() (bool, string) {
		img := sinkImage(t, "edge02")
		return img == "busybox:1.36", img
	})
	t.Logf("self-heal switched on by PUT: the image restored %s later (target 10 s; --self-heal-delay 2 s)", took.Round(time.Millisecond))
	waitFor(t, "all Synced after self-heal", o.allSynced(vfwDIG, total))
	patchSinkImage(t, "edge02", "busybox:1.38")
	took = measure(t, "image restored again", func() (bool, string) {
		img := sinkImage(t, "edge02")
		return img == "busybox:1.36", img
	})
	t.Logf("with self-heal on, a second patch undone %s after it was made (target 10 s)", took.Round(time.Millisecond))
	waitFor(t, "a self-heal in the history", func() (bool, string) {
		var heals []string
		for _, e := range o.historyOf(vfwDIG + "/status") {
			if e.Kind == history.KindHeal && e.Resource.Name == "sink" {
				heals = append(heals, e.By+"/"+e.Cluster)
			}
		}
		// Two heals at least: under load the monitor's report of a heal
		// can come later than the streak's backoff, and then the
		// controller heals again, as designed.
		ok := len(heals) >= 2
		for _, h := range heals {
			ok = ok && h == "self-heal/edge02"
		}
		return ok, fmt.Sprint(heals)
	})
	r := resourceOf(o.digStatus(vfwDIG, "app=sink"), "sink", "edge02", "Deployment", "sink")
	if r.Heal == nil || r.Heal.Count < 2 || r.Heal.By != "self-heal" {
		t.Fatalf("the sink's heal record: %+v", r.Heal)
	}
	o.must(200, "PUT", vfwDIG, obj("vfw-dig", map[string]any{"compositeProfile": "vfw-profile", "version": "r1"}))

}

// driftOwnership: a second DIG whose app renders the first's ConfigMap is
// refused, naming the first; terminating it leaves the object in place.
func driftOwnership(t *testing.T, o *orch) {
	before := configMap(t, "edge01", "firewall-config")
	intruder := oneAppDIG(t, o, "intruders", "intruder", configMapChart(t, "intruder", "firewall-config", "intruder"))
	o.must(202, "POST", intruder+"/instantiate", nil)
	var reason string
	waitFor(t, "the intruder's ConfigMap Failed", func() (bool, string) {
		r := resourceOf(o.digStatus(intruder, ""), "intruder", "edge01", "ConfigMap", "firewall-config")
		if r == nil {
			return false, "not listed"
		}
		reason = r.Reason
		return r.RsyncStatus == "Failed", r.RsyncStatus + ": " + r.Reason
	})
	if !strings.HasPrefix(reason, "owned by deployment intent group vfw/vfw/v1/vfw-dig") {
		t.Fatalf("reason %q does not name the first DIG", reason)
	}
	after := configMap(t, "edge01", "firewall-config")
	if after.UID != before.UID || after.Data["version"] != "one" || after.Annotations["argus.io/owner"] != "dig:vfw/vfw/v1/vfw-dig" ||
		after.Labels["emco/deployment-id"] != before.Labels["emco/deployment-id"] {
		t.Fatalf("the first DIG's object changed: %v %v %v", after.Data, after.Annotations, after.Labels)
	}
	if st, why := o.syncOf(vfwDIG, "firewall", "edge01", "ConfigMap", "firewall-config"); st != "Synced" {
		t.Fatalf("the first DIG's object is %s (%s)", st, why)
	}
	o.must(202, "POST", intruder+"/terminate", nil)
	o.waitJSON(intruder+"/status", "intruder terminated", deployedStatusIs("Terminated"))
	if cm := configMap(t, "edge01", "firewall-config"); cm == nil || cm.UID != before.UID || cm.Data["version"] != "one" {
		t.Fatalf("terminating the intruder removed or changed the first DIG's object: %v", cm)
	}
	if st, why := o.syncOf(vfwDIG, "firewall", "edge01", "ConfigMap", "firewall-config"); st != "Synced" {
		t.Fatalf("after the intruder's terminate the first DIG's object is %s (%s)", st, why)
	}
}

// driftAdoption: an object made by hand is refused until the DIG adopts
// it and the object allows it.
func driftAdoption(t *testing.T, o *orch) {
	cms := edge("edge01").Clientset().CoreV1().ConfigMaps("default")
	_ = cms.Delete(context.Background(), "handmade-config", metav1.DeleteOptions{})
	hand, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "handmade-config"},
		Data: map[string]string{"version": "by-hand"}}, metav1.CreateOptions{FieldManager: "e2e-by-hand"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), "handmade-config", metav1.DeleteOptions{}) })
	adopter := oneAppDIG(t, o, "adopters", "adopter", configMapChart(t, "adopter", "handmade-config", "adopted"))
	o.must(202, "POST", adopter+"/instantiate", nil)
	waitFor(t, "refused", func() (bool, string) {
		r := resourceOf(o.digStatus(adopter, ""), "adopter", "edge01", "ConfigMap", "handmade-config")
		return r != nil && r.RsyncStatus == "Failed" && strings.Contains(r.Reason, "owned by no Argus deployment (written by e2e-by-hand)"), fmt.Sprint(r)
	})
	if cm := configMap(t, "edge01", "handmade-config"); cm.Data["version"] != "by-hand" || cm.Annotations["argus.io/owner"] != "" {
		t.Fatalf("overwritten without adoption: %v %v", cm.Data, cm.Annotations)
	}
	// Adoption: the DIG asks (PUT, at once) and the object allows it.
	o.must(200, "PUT", adopter, obj("adopters-dig", map[string]any{"compositeProfile": "profile", "version": "r1",
		"syncPolicy": map[string]any{"adopt": true}}))
	if _, err := cms.Patch(context.Background(), "handmade-config", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"argus.io/adopt":"true"}}}`), metav1.PatchOptions{FieldManager: "e2e-by-hand"}); err != nil {
		t.Fatal(err)
	}
	o.must(202, "POST", adopter+"/update", nil)
	waitFor(t, "adopted", func() (bool, string) {
		cm := configMap(t, "edge01", "handmade-config")
		return cm.Data["version"] == "adopted" && cm.Annotations["argus.io/owner"] == "dig:vfw/adopters/v1/adopters-dig" &&
			cm.Annotations["argus.io/adopt"] == "", fmt.Sprint(cm.Data, cm.Annotations)
	})
	if cm := configMap(t, "edge01", "handmade-config"); cm.UID != hand.UID {
		t.Fatal("the object was replaced, not adopted")
	}
	waitFor(t, "adoption in the history", func() (bool, string) {
		e := findEntry(o.historyOf(adopter+"/status"), history.KindAdopt, "handmade-config")
		return e != nil && strings.Contains(e.AdoptedFrom, "e2e-by-hand"), fmt.Sprint(e)
	})
	o.must(202, "POST", adopter+"/terminate", nil)
	waitFor(t, "the adopted object deleted with its DIG", func() (bool, string) {
		cm := configMap(t, "edge01", "handmade-config")
		return cm == nil || cm.DeletionTimestamp != nil, "still there"
	})
}

// Two v1 instances whose charts render the same objects: the second create
// answers an error naming the first (its resources refused, "owned by v1
// instance <first>") and leaves nothing on the cluster; the first's
// objects stay as they were.
func TestV1InstancesCollide(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("v1twin"), "/"+testenv.UniqueName("v1twin"))
	startMonitors(t, sim)
	cl := sim.Cluster("cluster2")
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "twins", "cloud-owner": "o"}, cl.Kubeconfig); code != 201 {
		t.Fatalf("connectivity-info: %d %s", code, body)
	}
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "twin", "rb-version": "v1"})
	o.must(200, "POST", "/v1/rb/definition/twin/v1/content", testenv.Archive(t, "testdata/charts/frontend"))
	create := map[string]any{"cloud-region": "twins", "rb-name": "twin", "rb-version": "v1", "profile-name": "default", "release-name": "twin"}
	var first catalog.InstanceSpec
	_ = json.Unmarshal([]byte(o.must(201, "POST", "/v1/instance", create)), &first)
	cs := cl.Clientset()
	ctx := context.Background()
	dep, err := cs.AppsV1().Deployments("default").Get(ctx, "twin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The second create meets the first's objects: rsync refuses them
	// (owned by the first), so the create answers as k8splugin does and
	// reverts what it made.
	code, body := o.call("POST", "/v1/instance", create)
	if code < 400 || !strings.Contains(body, "owned by v1 instance "+first.ID) {
		t.Fatalf("the second create: %d %s, want an error naming the first instance", code, body)
	}
	t.Logf("the second create answered %d: %.300s", code, body)
	var list []catalog.InstanceSpec
	_ = json.Unmarshal([]byte(o.must(200, "GET", "/v1/instance", nil)), &list)
	if len(list) != 1 || list[0].ID != first.ID {
		t.Fatalf("instances after the refused create: %+v", list)
	}
	// Nothing of the second remains on the cluster: no object labelled
	// with another instance, no bundle but the first's.
	waitFor(t, "nothing of the second instance on the cluster", func() (bool, string) {
		var left []string
		for _, kind := range []string{"configmaps", "services", "deployments"} {
			var l struct {
				Items []struct{ Metadata metav1.ObjectMeta }
			}
			raw, err := cs.RESTClient().Get().AbsPath(pathOf(kind)).Param("labelSelector", rbInstanceLabel).DoRaw(ctx)
			if err != nil {
				return false, err.Error()
			}
			_ = json.Unmarshal(raw, &l)
			for _, it := range l.Items {
				if id := it.Metadata.Labels[rbInstanceLabel]; strings.HasPrefix(it.Metadata.Name, "twin") && id != first.ID {
					left = append(left, kind+"/"+it.Metadata.Name+" of "+id)
				}
			}
		}
		var bundles struct {
			Items []struct{ Metadata metav1.ObjectMeta }
		}
		raw, err := cs.RESTClient().Get().AbsPath("/apis/k8splugin.io/v1alpha1/namespaces/default/resourcebundlestates").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		_ = json.Unmarshal(raw, &bundles)
		for _, b := range bundles.Items {
			if strings.HasPrefix(b.Metadata.Name, "twin-") && b.Metadata.Name != "twin-"+first.ID {
				left = append(left, "bundle "+b.Metadata.Name)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
	// The first's objects are as it left them, and Synced.
	after, err := cs.AppsV1().Deployments("default").Get(ctx, "twin", metav1.GetOptions{})
	if err != nil || after.UID != dep.UID || after.Labels[rbInstanceLabel] != first.ID || after.Annotations["argus.io/owner"] != "instance:"+first.ID {
		t.Fatalf("the first instance's Deployment changed: %v %v", after, err)
	}
	if cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "twin-config", metav1.GetOptions{}); err != nil || cm.Labels[rbInstanceLabel] != first.ID {
		t.Fatalf("the first instance's ConfigMap: %v %v", cm, err)
	}
	waitFor(t, "the first instance Synced", func() (bool, string) {
		st := o.v1Status(first.ID)
		return st.SyncCounts["Synced"] == 3 && len(st.SyncCounts) == 1, fmt.Sprint(st.SyncCounts)
	})
	o.must(202, "DELETE", "/v1/instance/"+first.ID, nil)
	o.must(204, "DELETE", "/v1/connectivity-info/twins", nil)
}

func pathOf(kind string) string {
	if kind == "deployments" {
		return "/apis/apps/v1/namespaces/default/deployments"
	}
	return "/api/v1/namespaces/default/" + kind
}
