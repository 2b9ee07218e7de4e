package monitor

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

func obj(apiVersion, kind, name string, extra map[string]any) *unstructured.Unstructured {
	o := map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{
			"name": name, "namespace": "default",
			"managedFields": []any{map[string]any{"manager": "kubectl"}},
			"labels":        map[string]any{v1alpha1.LabelDeploymentID: "1-app"},
		},
	}
	for k, v := range extra {
		o[k] = v
	}
	return &unstructured.Unstructured{Object: o}
}

func readyPod(name string) *unstructured.Unstructured {
	return obj("v1", "Pod", name, map[string]any{
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}},
		"status": map[string]any{"phase": "Running",
			"conditions":        []any{map[string]any{"type": "Ready", "status": "True"}},
			"containerStatuses": []any{map[string]any{"name": "c", "ready": true, "restartCount": int64(0)}}},
	})
}

func TestBuildStatusSortsEntriesIntoLists(t *testing.T) {
	crash := obj("v1", "Pod", "web-1", map[string]any{"status": map[string]any{"phase": "Running",
		"containerStatuses": []any{map[string]any{"name": "c", "ready": false, "state": map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}}}}}})
	objs := []*unstructured.Unstructured{
		readyPod("web-0"), crash,
		obj("apps/v1", "Deployment", "web", map[string]any{"spec": map[string]any{"replicas": int64(2)},
			"status": map[string]any{"replicas": int64(2), "updatedReplicas": int64(2), "readyReplicas": int64(1), "availableReplicas": int64(1)}}),
		obj("v1", "Secret", "creds", map[string]any{"data": map[string]any{"password": "c2VjcmV0"}}),
		obj("example.com/v1", "Widget", "w", map[string]any{"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}}),
		readyPod("web-0"), // the same object seen twice (two watched versions)
	}
	st, err := buildStatus(objs, nil, 3, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st.ResourceCount != 5 || len(st.PodStatuses) != 2 || len(st.DeploymentStatuses) != 1 || len(st.SecretStatuses) != 1 || len(st.ResourceStatuses) != 1 {
		t.Fatalf("counts: %d pods=%d deployments=%d secrets=%d other=%d", st.ResourceCount, len(st.PodStatuses), len(st.DeploymentStatuses), len(st.SecretStatuses), len(st.ResourceStatuses))
	}
	if st.Ready || st.ObservedGeneration != 3 || st.Trimmed {
		t.Fatalf("ready=%v generation=%d trimmed=%v", st.Ready, st.ObservedGeneration, st.Trimmed)
	}
	if !strings.HasPrefix(st.Reason, "pod web-1: container c: CrashLoopBackOff; deployment web: 1 of 2 replicas ready") {
		t.Fatalf("reason = %q", st.Reason)
	}
	if st.PodStatuses[0].ReadyStatus != "Ready" || st.PodStatuses[1].ReadyStatus != "Failed" {
		t.Fatalf("pod entries: %+v", st.PodStatuses)
	}
	data, _ := json.Marshal(st)
	for _, leak := range []string{"managedFields", "c2VjcmV0"} {
		if strings.Contains(string(data), leak) {
			t.Errorf("status carries %s", leak)
		}
	}
	if w := st.ResourceStatuses[0]; w.Group != "example.com" || w.Kind != "Widget" || w.Name != "w" || w.Namespace != "default" || w.ReadyStatus != "Ready" {
		t.Fatalf("custom entry: %+v", w)
	}
}

func TestBuildStatusEmptyBundleIsReadyWithEmptyLists(t *testing.T) {
	st, err := buildStatus(nil, nil, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ready || st.ResourceCount != 0 || st.Reason != "" {
		t.Fatalf("status = %+v", st)
	}
	data, _ := json.Marshal(st)
	// Empty lists are written as [] so a merge patch clears what was there.
	for _, f := range []string{`"podStatuses":[]`, `"resourceStatuses":[]`, `"unwatchedKinds":[]`, `"trimmed":false`, `"reason":""`} {
		if !strings.Contains(string(data), f) {
			t.Errorf("status JSON lacks %s: %s", f, data)
		}
	}
}

func TestUnwatchedKindMakesBundleUnknown(t *testing.T) {
	unwatched := []v1alpha1.KindCondition{{GroupVersionKind: v1alpha1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, Reason: "kind not served"}}
	st, err := buildStatus([]*unstructured.Unstructured{readyPod("p")}, unwatched, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready || !strings.Contains(st.Reason, "kind example.com/v1/Gadget: kind not served") || len(st.UnwatchedKinds) != 1 {
		t.Fatalf("status = ready %v reason %q", st.Ready, st.Reason)
	}
}

func TestThousandPodsAreTrimmedUnderTheLimit(t *testing.T) {
	bigAnnotation := strings.Repeat("x", 2000)
	var objs []*unstructured.Unstructured
	for i := range 1000 {
		p := readyPod(fmt.Sprintf("pod-%04d", i))
		meta := p.Object["metadata"].(map[string]any)
		meta["annotations"] = map[string]any{lastAppliedAnnotation: bigAnnotation, "keep": "me"}
		objs = append(objs, p)
	}
	const limit = 1_000_000
	st, err := buildStatus(objs, nil, 1, limit)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(st)
	if len(data) > limit || !st.Trimmed || st.ResourceCount != 1000 || len(st.PodStatuses) != 1000 || !st.Ready {
		t.Fatalf("size %d trimmed %v count %d ready %v", len(data), st.Trimmed, st.ResourceCount, st.Ready)
	}
	t.Logf("1000 pods: status %d bytes", len(data))
	// The cached objects were not touched.
	if ann := objs[0].GetAnnotations(); ann[lastAppliedAnnotation] != bigAnnotation {
		t.Fatal("trimming mutated a cached object")
	}
	if _, ok := objs[0].Object["spec"]; !ok {
		t.Fatal("trimming mutated a cached object's spec")
	}
}

func TestTrimLevelsKeepTheEssentials(t *testing.T) {
	p := readyPod("p")
	p.Object["metadata"].(map[string]any)["annotations"] = map[string]any{lastAppliedAnnotation: "{}"}
	got := trimObject(p, trimPodToEssence)
	want := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "default"},
		"status": map[string]any{"phase": "Running",
			"conditions":        []any{map[string]any{"type": "Ready", "status": "True"}},
			"containerStatuses": []any{map[string]any{"name": "c", "ready": true}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trimmed pod = %#v", got)
	}
}

// BenchmarkBuildStatus1000Pods is the monitor's CPU cost of one sync of a
// 1,000-pod bundle: evaluate, build, measure and trim.
func BenchmarkBuildStatus1000Pods(b *testing.B) {
	var objs []*unstructured.Unstructured
	for i := range 1000 {
		p := readyPod(fmt.Sprintf("pod-%04d", i))
		p.Object["metadata"].(map[string]any)["annotations"] = map[string]any{lastAppliedAnnotation: strings.Repeat("x", 900)}
		objs = append(objs, p)
	}
	for b.Loop() {
		if _, err := buildStatus(objs, nil, 1, 1_000_000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1000*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
}

// A Secret's last-applied-configuration annotation holds its data: it is
// dropped with the data at every trim level, and kept on other kinds
// until trimming needs the room.
func TestSecretsLoseTheAnnotationThatCopiesTheirData(t *testing.T) {
	s := obj("v1", "Secret", "creds", map[string]any{"data": map[string]any{"password": "c2VjcmV0"}})
	s.Object["metadata"].(map[string]any)["annotations"] = map[string]any{lastAppliedAnnotation: `{"data":{"password":"c2VjcmV0"}}`, "keep": "me"}
	got := trimObject(s, trimNone)
	data, _ := json.Marshal(got)
	if strings.Contains(string(data), "c2VjcmV0") || !strings.Contains(string(data), `"keep":"me"`) {
		t.Fatalf("trimmed Secret = %s", data)
	}
	cm := obj("v1", "ConfigMap", "cm", nil)
	cm.Object["metadata"].(map[string]any)["annotations"] = map[string]any{lastAppliedAnnotation: "{}"}
	if data, _ := json.Marshal(trimObject(cm, trimNone)); !strings.Contains(string(data), lastAppliedAnnotation) {
		t.Fatalf("a ConfigMap lost its annotation untrimmed: %s", data)
	}
}

// The hash of the fields Argus applies is taken before the cache strips the
// managed fields, and reported per entry without ever being part of the
// object.
func TestEntriesCarryTheHashOfArgusFields(t *testing.T) {
	argus := []any{map[string]any{"manager": "argus", "operation": "Apply", "apiVersion": "v1",
		"fieldsV1": map[string]any{"f:data": map[string]any{"f:k": map[string]any{}}}}}
	cm := obj("v1", "ConfigMap", "cm", map[string]any{"data": map[string]any{"k": "v"}})
	cm.Object["metadata"].(map[string]any)["managedFields"] = argus
	widget := obj("example.com/v1", "Widget", "w", map[string]any{"data": map[string]any{"k": "v"}})
	widget.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "argus", "operation": "Apply",
		"apiVersion": "example.com/v1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:k": map[string]any{}}}}}
	var cached []*unstructured.Unstructured
	for _, o := range []*unstructured.Unstructured{cm, widget, readyPod("p")} {
		c, err := stripForCache(o)
		if err != nil {
			t.Fatal(err)
		}
		cached = append(cached, c.(*unstructured.Unstructured))
	}
	st, err := buildStatus(cached, nil, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !st.FieldsHashed || len(st.ConfigMapStatuses[0].ManagedFieldsHash) != 32 || len(st.ResourceStatuses[0].ManagedFieldsHash) != 32 {
		t.Fatalf("hashed=%v configmap %q widget %q", st.FieldsHashed, st.ConfigMapStatuses[0].ManagedFieldsHash, st.ResourceStatuses[0].ManagedFieldsHash)
	}
	if st.PodStatuses[0].ManagedFieldsHash != "" {
		t.Fatalf("a pod Argus never applied has hash %q", st.PodStatuses[0].ManagedFieldsHash)
	}
	data, _ := json.Marshal(st)
	if strings.Contains(string(data), hashKey) || strings.Contains(string(data), "managedFields\"") {
		t.Fatalf("the cache's hash key or managed fields leaked into the status: %s", data)
	}
}

// A merge patch drops nulls, so the bundle the API server stores after a
// write lacks the nulls the status carried (a condition's lastProbeTime):
// the next sync must find it the same, or every write is followed by a
// second one.
func TestStatusWrittenIsFoundTheSame(t *testing.T) {
	pod := readyPod("p")
	conds := pod.Object["status"].(map[string]any)["conditions"].([]any)
	conds[0].(map[string]any)["lastProbeTime"] = nil
	st, err := buildStatus([]*unstructured.Unstructured{pod}, nil, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(st)
	if !strings.Contains(string(data), `"lastProbeTime":null`) {
		t.Fatalf("the status carries no null to drop: %s", data)
	}
	stored := map[string]any{}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(data), `"lastProbeTime":null,`, "")), &stored); err != nil {
		t.Fatal(err)
	}
	bundle := &unstructured.Unstructured{Object: map[string]any{"status": stored}}
	if same, err := sameStatus(bundle, st); err != nil || !same {
		t.Fatalf("the status as stored differs from the one written (same=%v, err=%v)", same, err)
	}
	st.PodStatuses[0].ReadyStatus = "NotReady"
	if same, err := sameStatus(bundle, st); err != nil || same {
		t.Fatalf("a changed entry is found the same (same=%v, err=%v)", same, err)
	}
}
