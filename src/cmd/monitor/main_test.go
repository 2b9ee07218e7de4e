package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/config"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var (
	cluster *simcluster.Cluster
	dyn     dynamic.Interface
	kube    kubernetes.Interface
)

const manifestDir = "../../../deployments/kubernetes/monitor"

// Test CRDs: Widget is named in bundles' spec.kinds; Gadget only via extra kinds.
const testCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.argus.io}
spec:
  group: test.argus.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.test.argus.io}
spec:
  group: test.argus.io
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// The test binary doubles as the monitor when ARGUS_TEST_RUN_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("ARGUS_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	testenv.MainWithClusters(m, 1, func(_ *testenv.Stores, set *simcluster.Set) error {
		cluster = set.Clusters[0]
		cfg := cluster.RESTConfig()
		dyn = dynamic.NewForConfigOrDie(cfg)
		kube = kubernetes.NewForConfigOrDie(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The monitor's manifests own the CRD; install it as an operator would.
		if _, err := testenv.ApplyManifestFiles(ctx, cfg, false, filepath.Join(manifestDir, "k8splugin.io_resourcebundlestates.yaml")); err != nil {
			return err
		}
		crds, err := testenv.DecodeManifests([]byte(testCRDs))
		if err != nil {
			return err
		}
		if err := testenv.Apply(ctx, cfg, false, crds...); err != nil {
			return err
		}
		return testenv.WaitEstablished(ctx, cfg, "resourcebundlestates.k8splugin.io", "widgets.test.argus.io", "gadgets.test.argus.io")
	})
}

// ---- helpers ----

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds (deadline 60s) and returns how long it took.
func eventually(t testing.TB, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return eventuallyWithin(t, 60*time.Second, what, cond)
}

func eventuallyWithin(t testing.TB, deadline time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < deadline {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s: not true after %s; last state: %s", what, deadline, last)
	return 0
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns := testenv.UniqueName("mon-")
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := dyn.Resource(gvr("", "v1", "namespaces")).Create(ctxFor(t), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

type monitorProc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	mu   sync.Mutex
	logs bytes.Buffer
}

// startMonitor runs the monitor as a process against the cluster, watching
// one namespace (and keeping its Lease and ConfigMap there).
func startMonitor(t testing.TB, ns string, args ...string) *monitorProc {
	t.Helper()
	base := []string{"--kubeconfig", cluster.KubeconfigPath, "--namespace", ns, "--lease-namespace", ns,
		"--listen", "127.0.0.1:0", "--log-level", "debug", "--lease-renew-interval", "1s"}
	cmd := exec.Command(os.Args[0], append(base, args...)...)
	cmd.Env = append(os.Environ(), "ARGUS_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &monitorProc{cmd: cmd, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var e struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "monitor serving health and metrics" {
				addr <- e.Addr
			}
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.addr = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatal("monitor did not start")
	}
	return p
}

func (p *monitorProc) stop(t testing.TB) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.mu.Lock()
			t.Errorf("monitor exit: %v\n%s", err, p.logs.String())
			p.mu.Unlock()
		}
	case <-time.After(30 * time.Second): // the kubelet's default grace period, after which it kills
		// A goroutine dump (SIGQUIT) says what held the stop up: once in
		// CI, under -race on a loaded machine, 15 s were not enough.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.mu.Lock()
		logs := p.logs.String()
		p.mu.Unlock()
		t.Errorf("monitor did not stop within 30s of SIGTERM; the end of its output:\n%s", logs[max(0, len(logs)-64<<10):])
	}
}

// metric reads one unlabelled series from the monitor's /metrics.
func (p *monitorProc) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	v, ok := testenv.Metric(string(body), name)
	if !ok {
		t.Fatalf("metric %s not found", name)
	}
	return v
}

func labelsFor(id string) map[string]any {
	return map[string]any{v1alpha1.LabelDeploymentID: id}
}

func createBundle(t testing.TB, ns, name, id string, kinds ...v1alpha1.GroupVersionKind) {
	t.Helper()
	k := make([]any, 0, len(kinds))
	for _, g := range kinds {
		k = append(k, map[string]any{"group": g.Group, "version": g.Version, "kind": g.Kind})
	}
	rbs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": v1alpha1.Kind,
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labelsFor(id)},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": labelsFor(id)}, "kinds": k},
	}}
	if _, err := dyn.Resource(v1alpha1.GVR()).Namespace(ns).Create(ctxFor(t), rbs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getBundle(t testing.TB, ns, name string) (*v1alpha1.ResourceBundleState, int) {
	t.Helper()
	u, err := dyn.Resource(v1alpha1.GVR()).Namespace(ns).Get(ctxFor(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var rbs v1alpha1.ResourceBundleState
	if err := json.Unmarshal(data, &rbs); err != nil {
		t.Fatal(err)
	}
	return &rbs, len(data)
}

// entry is what a test reads back from a bundle for one object.
type entry struct {
	readyStatus, reason string
	annotations         map[string]string
}

// entries maps "Kind/name" to each entry of every list of the bundle.
func entries(rbs *v1alpha1.ResourceBundleState) map[string]entry {
	out := map[string]entry{}
	s := rbs.Status
	for _, list := range [][]v1alpha1.ResourceStatus{s.PodStatuses, s.DeploymentStatuses, s.ServiceStatuses,
		s.ConfigMapStatuses, s.SecretStatuses, s.DaemonSetStatuses, s.IngressStatuses, s.JobStatuses,
		s.StatefulSetStatuses, s.ReplicaSetStatuses, s.PersistentVolumeClaimStatuses, s.CronJobStatuses} {
		for _, e := range list {
			var meta metav1.ObjectMeta
			_ = json.Unmarshal(e.Metadata.Raw, &meta)
			out[e.Kind+"/"+meta.Name] = entry{e.ReadyStatus, e.Reason, meta.Annotations}
		}
	}
	for _, e := range s.ResourceStatuses {
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		_ = json.Unmarshal(e.Object.Raw, &obj)
		out[e.Kind+"/"+e.Name] = entry{e.ReadyStatus, e.Reason, obj.Metadata.Annotations}
	}
	return out
}

func keys(m map[string]entry) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func create(t testing.TB, ns string, r schema.GroupVersionResource, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	if _, err := dyn.Resource(r).Namespace(ns).Create(ctxFor(t), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", r.Resource, err)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration{}, d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxOf(d []time.Duration) time.Duration {
	m := time.Duration(0)
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func podTemplate(labels map[string]any) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": labels},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}},
	}
}

// trackedObjects returns one labelled object of every typed kind of SPEC
// section 2, and of the Widget CRD, keyed by "Kind/name".
func trackedObjects(id string) map[string]struct {
	gvr schema.GroupVersionResource
	obj map[string]any
} {
	meta := func(name string) map[string]any { return map[string]any{"name": name, "labels": labelsFor(id)} }
	tmpl := func(app string) map[string]any { return podTemplate(map[string]any{"app": app}) }
	sel := func(app string) map[string]any { return map[string]any{"matchLabels": map[string]any{"app": app}} }
	type ent = struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}
	return map[string]ent{
		"Pod/p1": {gvr("", "v1", "pods"), map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta("p1"),
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}},
		"Deployment/d1": {gvr("apps", "v1", "deployments"), map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("d1"),
			"spec": map[string]any{"replicas": int64(1), "selector": sel("d1"), "template": tmpl("d1")}}},
		"Service/s1": {gvr("", "v1", "services"), map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": meta("s1"),
			"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}},
		"ConfigMap/c1": {gvr("", "v1", "configmaps"), map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c1"), "data": map[string]any{"k": "v"}}},
		"Secret/x1":    {gvr("", "v1", "secrets"), map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta("x1"), "stringData": map[string]any{"password": "hunter2"}}},
		"DaemonSet/ds1": {gvr("apps", "v1", "daemonsets"), map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("ds1"),
			"spec": map[string]any{"selector": sel("ds1"), "template": tmpl("ds1")}}},
		"Ingress/i1": {gvr("networking.k8s.io", "v1", "ingresses"), map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta("i1"),
			"spec": map[string]any{"defaultBackend": map[string]any{"service": map[string]any{"name": "s1", "port": map[string]any{"number": int64(80)}}}}}},
		"Job/j1": {gvr("batch", "v1", "jobs"), map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("j1"),
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never",
				"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}},
		"StatefulSet/ss1": {gvr("apps", "v1", "statefulsets"), map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("ss1"),
			"spec": map[string]any{"serviceName": "ss1", "replicas": int64(1), "selector": sel("ss1"), "template": tmpl("ss1")}}},
		"ReplicaSet/rs1": {gvr("apps", "v1", "replicasets"), map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("rs1"),
			"spec": map[string]any{"replicas": int64(1), "selector": sel("rs1"), "template": tmpl("rs1")}}},
		"PersistentVolumeClaim/pvc1": {gvr("", "v1", "persistentvolumeclaims"), map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("pvc1"),
			"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}},
		"CronJob/cj1": {gvr("batch", "v1", "cronjobs"), map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("cj1"),
			"spec": map[string]any{"schedule": "0 3 * * *", "jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}}}},
		"Widget/w1": {gvr("test.argus.io", "v1", "widgets"), map[string]any{"apiVersion": "test.argus.io/v1", "kind": "Widget", "metadata": meta("w1"),
			"spec": map[string]any{"size": int64(1)}}},
	}
}

var widgetGVK = v1alpha1.GroupVersionKind{Group: "test.argus.io", Version: "v1", Kind: "Widget"}

// ---- acceptance 1: every kind's create, update and delete reach the bundle ----

func TestEveryKindIsTrackedThroughCreateUpdateDelete(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	createBundle(t, ns, "app-1", "1-app", widgetGVK)
	objs := trackedObjects("1-app")
	var creates, updates, deletes []time.Duration
	ctx := ctxFor(t)
	for _, key := range sortedKeys(objs) {
		o := objs[key]
		start := time.Now()
		create(t, ns, o.gvr, o.obj)
		eventually(t, key+" created", func() (bool, string) {
			rbs, _ := getBundle(t, ns, "app-1")
			_, ok := entries(rbs)[key]
			return ok, strings.Join(keys(entries(rbs)), ",")
		})
		creates = append(creates, time.Since(start))

		start = time.Now()
		patch := []byte(`{"metadata":{"annotations":{"argus.io/rev":"2"}}}`)
		if _, err := dyn.Resource(o.gvr).Namespace(ns).Patch(ctx, o.obj["metadata"].(map[string]any)["name"].(string), "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, key+" updated", func() (bool, string) {
			rbs, _ := getBundle(t, ns, "app-1")
			e := entries(rbs)[key]
			return e.annotations["argus.io/rev"] == "2", fmt.Sprint(e)
		})
		updates = append(updates, time.Since(start))
	}
	rbs, size := getBundle(t, ns, "app-1")
	if int(rbs.Status.ResourceCount) != len(objs) {
		t.Fatalf("resourceCount = %d, want %d: %v", rbs.Status.ResourceCount, len(objs), keys(entries(rbs)))
	}
	if data, _ := json.Marshal(rbs.Status.SecretStatuses); strings.Contains(string(data), "hunter2") || strings.Contains(string(data), "aHVudGVyMg") {
		t.Fatal("secret data leaked into the bundle")
	}
	t.Logf("bundle with %d objects: %d bytes; ready=%v reason=%q", len(objs), size, rbs.Status.Ready, rbs.Status.Reason)

	for _, key := range sortedKeys(objs) {
		o := objs[key]
		start := time.Now()
		if err := dyn.Resource(o.gvr).Namespace(ns).Delete(ctx, o.obj["metadata"].(map[string]any)["name"].(string), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, key+" deleted", func() (bool, string) {
			rbs, _ := getBundle(t, ns, "app-1")
			_, ok := entries(rbs)[key]
			return !ok, strings.Join(keys(entries(rbs)), ",")
		})
		deletes = append(deletes, time.Since(start))
	}
	t.Logf("delay to the bundle over %d kinds: create median %s max %s; update median %s max %s; delete median %s max %s (target < 1s; each median fails over 5s)",
		len(objs), median(creates).Round(time.Millisecond), maxOf(creates).Round(time.Millisecond),
		median(updates).Round(time.Millisecond), maxOf(updates).Round(time.Millisecond),
		median(deletes).Round(time.Millisecond), maxOf(deletes).Round(time.Millisecond))
	for what, l := range map[string][]time.Duration{"create": creates, "update": updates, "delete": deletes} {
		if m := median(l); m > 5*time.Second { // 5× the target: CI headroom; docs/benchmarks.md keeps the 1 s
			t.Errorf("%s to the bundle: median %s, want under 1s (fails over 5s)", what, m)
		}
	}
	eventually(t, "empty bundle", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "app-1")
		// The Job's and workloads' pods carry no bundle label, so nothing remains.
		return rbs.Status.ResourceCount == 0, fmt.Sprint(keys(entries(rbs)))
	})
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestCountIsRightAfterAMixOfCreatesAndDeletes(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	createBundle(t, ns, "mix", "2-mix")
	ctx := ctxFor(t)
	cms := dyn.Resource(gvr("", "v1", "configmaps")).Namespace(ns)
	want := map[string]entry{}
	for i := range 50 {
		name := fmt.Sprintf("cm-%02d", i)
		create(t, ns, gvr("", "v1", "configmaps"), map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "labels": labelsFor("2-mix")}})
		want["ConfigMap/"+name] = entry{}
		if i%2 == 1 { // delete the previous one while creates continue
			prev := fmt.Sprintf("cm-%02d", i-1)
			if err := cms.Delete(ctx, prev, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			delete(want, "ConfigMap/"+prev)
		}
	}
	eventually(t, "25 entries", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "mix")
		got := keys(entries(rbs))
		return rbs.Status.ResourceCount == 25 && strings.Join(got, ",") == strings.Join(keys(want), ","),
			fmt.Sprintf("count %d: %v", rbs.Status.ResourceCount, got)
	})
}

// ---- acceptance 2: a Deployment's readiness, and a pod going bad ----

func TestDeploymentReadinessFollowsItsPods(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	createBundle(t, ns, "web", "3-web")
	// As rsync does: the Deployment and its pod template carry the label.
	create(t, ns, gvr("apps", "v1", "deployments"), map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": labelsFor("3-web")},
		"spec": map[string]any{"replicas": int64(3),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": podTemplate(map[string]any{"app": "web", v1alpha1.LabelDeploymentID: "3-web"})}})
	var pods []string
	took := eventually(t, "bundle ready", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "web")
		pods = pods[:0]
		for k := range entries(rbs) {
			if strings.HasPrefix(k, "Pod/") {
				pods = append(pods, strings.TrimPrefix(k, "Pod/"))
			}
		}
		return rbs.Status.Ready && len(pods) == 3, fmt.Sprintf("ready=%v reason=%q pods=%v", rbs.Status.Ready, rbs.Status.Reason, pods)
	})
	t.Logf("3-replica Deployment: bundle ready %s after creation", took.Round(time.Millisecond))

	sort.Strings(pods)
	bad := pods[0]
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"not-ready"}}}`, simcluster.StateAnnotation)
	if _, err := kube.CoreV1().Pods(ns).Patch(ctxFor(t), bad, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "not ready, naming the pod", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "web")
		return !rbs.Status.Ready && strings.Contains(rbs.Status.Reason, "pod "+bad+":"), rbs.Status.Reason
	})
	t.Logf("pod %s not ready: bundle not ready after %s", bad, time.Since(start).Round(time.Millisecond))

	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"crashloop"}}}`, simcluster.StateAnnotation)
	if _, err := kube.CoreV1().Pods(ns).Patch(ctxFor(t), pods[1], "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "crash loop reported first", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "web")
		return strings.HasPrefix(rbs.Status.Reason, "pod "+pods[1]+": container c: CrashLoopBackOff"), rbs.Status.Reason
	})
}

// ---- acceptance 5: objects changed while the monitor is down ----

func TestRestartReconcilesWhatHappenedWhileStopped(t *testing.T) {
	ns := newNamespace(t)
	mon := startMonitor(t, ns)
	createBundle(t, ns, "restart", "4-restart")
	cm := func(name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "labels": labelsFor("4-restart")}}
	}
	for i := range 6 {
		create(t, ns, gvr("", "v1", "configmaps"), cm(fmt.Sprintf("before-%d", i)))
	}
	eventually(t, "6 entries", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "restart")
		return rbs.Status.ResourceCount == 6, fmt.Sprint(rbs.Status.ResourceCount)
	})
	mon.stop(t)

	for i := range 5 {
		create(t, ns, gvr("", "v1", "configmaps"), cm(fmt.Sprintf("while-%d", i)))
	}
	for i := range 3 {
		if err := kube.CoreV1().ConfigMaps(ns).Delete(ctxFor(t), fmt.Sprintf("before-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startMonitor(t, ns)
	want := "ConfigMap/before-3,ConfigMap/before-4,ConfigMap/before-5,ConfigMap/while-0,ConfigMap/while-1,ConfigMap/while-2,ConfigMap/while-3,ConfigMap/while-4"
	eventually(t, "exactly the current objects", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "restart")
		got := strings.Join(keys(entries(rbs)), ",")
		return rbs.Status.ResourceCount == 8 && len(rbs.Status.ConfigMapStatuses) == 8 && got == want, got
	})
}

// ---- acceptance 6: a CRD kind added at run time ----

func TestExtraKindAddedAtRuntime(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	mon := startMonitor(t, ns)
	createBundle(t, ns, "gadgets", "5-gadget")
	ctx := ctxFor(t)
	gadgets := dyn.Resource(gvr("test.argus.io", "v1", "gadgets")).Namespace(ns)
	g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "test.argus.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "labels": labelsFor("5-gadget")}, "spec": map[string]any{}}}
	created, err := gadgets.Create(ctx, g, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "Warming", "message": "not yet"}}}
	if _, err := gadgets.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not a watched kind yet: the bundle is empty.
	eventually(t, "bundle written, gadget not tracked", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "gadgets")
		return rbs.Status.ObservedGeneration > 0 && rbs.Status.ResourceCount == 0, fmt.Sprint(rbs.Status.ResourceCount)
	})

	start := time.Now()
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("argus-monitor", "test.argus.io/v1/Gadget"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gadget tracked, pending from its Ready condition", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "gadgets")
		e, ok := entries(rbs)["Gadget/g1"]
		return ok && e.readyStatus == "Pending" && e.reason == "Warming: not yet" && len(rbs.Status.ResourceStatuses) == 1, fmt.Sprint(e)
	})
	t.Logf("extra kind tracked %s after the ConfigMap named it, without a restart", time.Since(start).Round(time.Millisecond))

	cur, err := gadgets.Get(ctx, "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
	if _, err := gadgets.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gadget ready", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "gadgets")
		return entries(rbs)["Gadget/g1"].readyStatus == "Ready" && rbs.Status.Ready, rbs.Status.Reason
	})

	// The same kind given by flag, after the ConfigMap is gone, keeps it tracked.
	mon.stop(t)
	if err := kube.CoreV1().ConfigMaps(ns).Delete(ctx, "argus-monitor", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	startMonitor(t, ns, "--extra-gvks", "test.argus.io/v1/Gadget")
	if _, err := gadgets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "test.argus.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g2", "labels": labelsFor("5-gadget")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second gadget tracked via the flag", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "gadgets")
		return rbs.Status.ResourceCount == 2, strings.Join(keys(entries(rbs)), ",")
	})
}

func configMap(name, gvks string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"extra-gvks": gvks}}
}

// ---- acceptance 8: bad input ----

func TestBadInput(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	createBundle(t, ns, "empty", "6-nothing-has-this")
	createBundle(t, ns, "labelled", "6-labelled")
	createBundle(t, ns, "unwatchable", "6-unwatchable", v1alpha1.GroupVersionKind{Group: "nope.example.com", Version: "v1", Kind: "Nothing"})
	create(t, ns, gvr("", "v1", "configmaps"), map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "unlabelled", "labels": map[string]any{"app": "x"}}})
	create(t, ns, gvr("", "v1", "configmaps"), map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "labelled", "labels": labelsFor("6-labelled")}})

	eventually(t, "selector matching nothing", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "empty")
		return rbs.Status.ObservedGeneration > 0 && rbs.Status.ResourceCount == 0 && rbs.Status.Ready && rbs.Status.Reason == "", fmt.Sprintf("%+v", rbs.Status)
	})
	eventually(t, "only the labelled object", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "labelled")
		return strings.Join(keys(entries(rbs)), ",") == "ConfigMap/labelled", strings.Join(keys(entries(rbs)), ",")
	})
	eventually(t, "unwatchable kind reported Unknown", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "unwatchable")
		s := rbs.Status
		return len(s.UnwatchedKinds) == 1 && s.UnwatchedKinds[0].Kind == "Nothing" && !s.Ready &&
			strings.Contains(s.Reason, "kind nope.example.com/v1/Nothing: kind is not served"), s.Reason
	})

	for _, args := range [][]string{
		{"--extra-gvks", "Widget"},
		{"--extra-gvks", "test.argus.io/v1/widget"},
		{"--extra-gvks", "a/b/c/d"},
	} {
		var stderr strings.Builder
		code := run(context.Background(), append(args, "--kubeconfig", cluster.KubeconfigPath), os.Getenv, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--extra-gvks") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming the flag", args, code, stderr.String())
		}
	}
}

// ---- heartbeat ----

func TestLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	var first time.Time
	eventually(t, "lease created", func() (bool, string) {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctxFor(t), "argus-monitor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		first = l.Spec.RenewTime.Time
		return l.Spec.HolderIdentity != nil && *l.Spec.LeaseDurationSeconds == 30, ""
	})
	eventually(t, "lease renewed", func() (bool, string) {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctxFor(t), "argus-monitor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), l.Spec.RenewTime.String()
	})
}

// ---- acceptance 7: manifests and the CRD against the Go types ----

func TestManifestsApplyAndCRDMatchesTypes(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	cfg := cluster.RESTConfig()
	// The namespace for real, so the namespaced objects can be dry-run into it.
	if _, err := testenv.ApplyManifestFiles(ctx, cfg, false, filepath.Join(manifestDir, "namespace.yaml")); err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.ApplyManifestFiles(ctx, cfg, true,
		filepath.Join(manifestDir, "k8splugin.io_resourcebundlestates.yaml"),
		filepath.Join(manifestDir, "rbac.yaml"),
		filepath.Join(manifestDir, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 9 { // CRD, service account, 3 cluster roles, binding, Role, RoleBinding, Deployment
		t.Fatalf("applied %d objects, want 9", len(objs))
	}

	// Every field of the Go types survives the API server's pruning.
	ns := newNamespace(t)
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	specRaw, statusRaw := raw(`{"replicas":2}`), raw(`{"phase":"Running"}`)
	full := v1alpha1.ResourceBundleState{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: ns, Labels: map[string]string{v1alpha1.LabelDeploymentID: "7-full"}},
		Spec: v1alpha1.ResourceBundleStateSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelDeploymentID: "7-full"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: []string{"b"}}}},
			Kinds: []v1alpha1.GroupVersionKind{{Group: "apps", Version: "v1", Kind: "Deployment"}},
		},
	}
	entry := v1alpha1.ResourceStatus{APIVersion: "v1", Kind: "Pod", Metadata: raw(`{"name":"p","labels":{"x":"y"},"annotations":{"k":"v"}}`),
		Spec: &specRaw, Status: &statusRaw, ReadyStatus: "Pending", Reason: "1 of 2", ManagedFieldsHash: "0123456789abcdef0123456789abcdef"}
	full.Status = v1alpha1.ResourceBundleStateStatus{
		Ready: true, ResourceCount: 13, Reason: "r", Trimmed: true, ObservedGeneration: 1, FieldsHashed: true,
		UnwatchedKinds: []v1alpha1.KindCondition{{GroupVersionKind: v1alpha1.GroupVersionKind{Group: "g", Version: "v", Kind: "K"}, Reason: "why"}},
		PodStatuses:    []v1alpha1.ResourceStatus{entry}, DeploymentStatuses: []v1alpha1.ResourceStatus{entry},
		ServiceStatuses: []v1alpha1.ResourceStatus{entry}, ConfigMapStatuses: []v1alpha1.ResourceStatus{entry},
		SecretStatuses: []v1alpha1.ResourceStatus{entry}, DaemonSetStatuses: []v1alpha1.ResourceStatus{entry},
		IngressStatuses: []v1alpha1.ResourceStatus{entry}, JobStatuses: []v1alpha1.ResourceStatus{entry},
		StatefulSetStatuses: []v1alpha1.ResourceStatus{entry}, ReplicaSetStatuses: []v1alpha1.ResourceStatus{entry},
		PersistentVolumeClaimStatuses: []v1alpha1.ResourceStatus{entry}, CronJobStatuses: []v1alpha1.ResourceStatus{entry},
		ResourceStatuses: []v1alpha1.CustomResourceStatus{{Group: "g", Version: "v", Kind: "K", Name: "n", Namespace: ns,
			Object: raw(`{"apiVersion":"g/v","kind":"K","metadata":{"name":"n"},"spec":{"a":1}}`), ReadyStatus: "Ready", Reason: "no readiness rule",
			ManagedFieldsHash: "fedcba9876543210fedcba9876543210"}},
	}
	toU := func(v any) *unstructured.Unstructured {
		data, _ := json.Marshal(v)
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		return u
	}
	rbsClient := dyn.Resource(v1alpha1.GVR()).Namespace(ns)
	created, err := rbsClient.Create(ctx, toU(full), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withStatus := toU(full)
	withStatus.SetResourceVersion(created.GetResourceVersion())
	if _, err := rbsClient.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	back, _ := getBundle(t, ns, "full")
	norm := func(v any) string {
		data, _ := json.Marshal(v)
		var g any
		_ = json.Unmarshal(data, &g)
		data, _ = json.Marshal(g)
		return string(data)
	}
	if norm(back.Spec) != norm(full.Spec) {
		t.Errorf("spec pruned by the CRD:\n got %s\nwant %s", norm(back.Spec), norm(full.Spec))
	}
	if norm(back.Status) != norm(full.Status) {
		t.Errorf("status pruned by the CRD:\n got %s\nwant %s", norm(back.Status), norm(full.Status))
	}
	if _, err := rbsClient.Create(ctx, toU(map[string]any{"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": v1alpha1.Kind,
		"metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"selector": "not-an-object"}}), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a malformed bundle was accepted: %v", err)
	}
}

// TestIsolatedChangeDelay measures the typical case: one change to a quiet
// bundle (paced 1 s apart, longer than --min-write-interval), which goes out
// at once.
func TestIsolatedChangeDelay(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	startMonitor(t, ns)
	createBundle(t, ns, "quiet", "10-quiet")
	create(t, ns, gvr("", "v1", "configmaps"), map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "labels": labelsFor("10-quiet")}})
	eventually(t, "tracked", func() (bool, string) {
		rbs, _ := getBundle(t, ns, "quiet")
		return rbs.Status.ResourceCount == 1, ""
	})
	pace := time.NewTicker(time.Second) // workload pacing, not synchronisation
	defer pace.Stop()
	var delays []time.Duration
	for i := range 10 {
		<-pace.C
		rev := strconv.Itoa(i)
		start := time.Now()
		patch := []byte(`{"metadata":{"annotations":{"rev":"` + rev + `"}}}`)
		if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctxFor(t), "c", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "update seen", func() (bool, string) {
			rbs, _ := getBundle(t, ns, "quiet")
			return entries(rbs)["ConfigMap/c"].annotations["rev"] == rev, ""
		})
		delays = append(delays, time.Since(start))
	}
	t.Logf("isolated change to the bundle: median %s, max %s over %d changes (target < 1s; fails over 5s)",
		median(delays).Round(time.Millisecond), maxOf(delays).Round(time.Millisecond), len(delays))
	if m := median(delays); m > 5*time.Second { // 5× the target: CI headroom; docs/benchmarks.md keeps the 1 s
		t.Errorf("isolated change to the bundle: median %s, want under 1s", m)
	}
}

var update = flag.Bool("update", false, "rewrite generated docs")

// The monitor's flag reference in docs/operations.md is generated from its
// flags; `make docs` runs this with -update.
func TestConfigReferenceIsCurrent(t *testing.T) {
	testenv.CheckGenerated(t, "../../../docs/operations.md", "monitor flags", config.Reference(Flags(&settings{})), *update)
}
