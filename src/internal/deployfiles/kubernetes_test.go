package deployfiles

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/argus-mc/argus/src/internal/testenv"
)

const namespace = "argus-system"

// kustomize builds deployments/kubernetes/<dir> as `kubectl apply -k` does:
// same library, default options (so no file outside the directory loads).
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repoPath(t, "deployments", "kubernetes", dir))
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	data, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeManifests(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

// typed converts strictly, so a misspelt field fails here, not only on a
// cluster.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return out
}

func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// checkHardened checks what every Argus pod promises: the image's non-root
// uid, no privilege escalation, no capabilities, a read-only root and the
// runtime's default seccomp profile.
func checkHardened(t *testing.T, img image, name string, spec corev1.PodSpec) {
	t.Helper()
	uid, _, _ := strings.Cut(img.user, ":")
	pod := spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || strconv.FormatInt(*pod.RunAsUser, 10) != uid ||
		pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot as uid %s with RuntimeDefault seccomp", name, pod, uid)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s/%s: securityContext %+v, want no escalation, read-only root, drop ALL", name, c.Name, sc)
		}
		if len(c.Command) == 0 || !img.binaries[c.Command[0]] {
			t.Errorf("%s/%s: command %q is not a binary of the image %v", name, c.Name, c.Command, img.binaries)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: resources %+v, want cpu and memory requests and a memory limit", name, c.Name, c.Resources)
		}
	}
}

func TestOrchestratorManifests(t *testing.T) {
	img := loadImage(t)
	objs := kustomize(t, "orchestrator")
	for _, o := range objs {
		if o.GetKind() != "Namespace" && o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}

	// Both kustomizations carry the namespace; the copies must not disagree
	// where one cluster runs both.
	if a, b := find(t, objs, "Namespace", namespace), find(t, kustomize(t, "monitor"), "Namespace", namespace); !reflect.DeepEqual(a, b) {
		t.Errorf("the orchestrator's namespace %v differs from the monitor's %v", a.Object, b.Object)
	}

	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "argus-orchestrator"))
	// One replica here (the ha overlay runs three); a rollout starts the new
	// pod before the old one stops, which replicas sharing work allow.
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("replicas %v, strategy %+v; want 1 and a rolling update that keeps the old pod until the new one is ready",
			d.Spec.Replicas, d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	checkHardened(t, img, "orchestrator", pod)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, probe := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || containerPort(c, probe.p.HTTPGet.Port) != 9015 {
			t.Errorf("%s probe %+v, want GET %s on 9015", probe.name, probe.p, probe.path)
		}
	}

	// The config file: the generated ConfigMap is mounted where --config
	// points, and holds config.yaml unchanged.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	var configPath string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = v
		}
	}
	dir, file, _ := strings.Cut(strings.TrimPrefix(configPath, "/etc/argus/"), "/")
	cfgVol := volumes[mounts["/etc/argus"].Name]
	if configPath == "" || dir == "" || file != "" || cfgVol.ConfigMap == nil {
		t.Fatalf("--config=%q, mounts %v: want a file in the ConfigMap mounted at /etc/argus", configPath, mounts)
	}
	cm := typed[corev1.ConfigMap](t, find(t, objs, "ConfigMap", cfgVol.ConfigMap.Name))
	if got := cm.Data[dir]; got != readFile(t, "deployments", "kubernetes", "orchestrator", "config.yaml") {
		t.Errorf("ConfigMap %s key %s does not hold config.yaml: %q", cm.Name, dir, got)
	}

	// Writable paths under the read-only root: the image's data dir and /tmp.
	for _, p := range []string{img.env["ARGUS_DATA_DIR"], "/tmp"} {
		if m, ok := mounts[p]; !ok || volumes[m.Name].EmptyDir == nil {
			t.Errorf("%s is not an emptyDir mount (mounts %v)", p, mounts)
		}
	}

	checkOrchestratorEnv(t, c)

	sa := typed[corev1.ServiceAccount](t, find(t, objs, "ServiceAccount", pod.ServiceAccountName))
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken ||
		pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the orchestrator needs no token for its own cluster, yet one would be mounted")
	}

	checkOrchestratorService(t, objs, d, c)
}

// checkOrchestratorEnv checks where the orchestrator's settings come from.
func checkOrchestratorEnv(t *testing.T, c corev1.Container) {
	t.Helper()
	// The MongoDB URI comes from the documented Secret, not the ConfigMap.
	secret := decodeFile(t, "deployments", "kubernetes", "orchestrator", "mongo-secret.example.yaml")
	var fromSecret bool
	for _, e := range c.Env {
		if e.Name == "ARGUS_MONGO_URI" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			_, hasKey := typed[corev1.Secret](t, secret[0]).StringData[ref.Key]
			fromSecret = ref.Name == secret[0].GetName() && hasKey
		}
	}
	if !fromSecret {
		t.Errorf("ARGUS_MONGO_URI is not read from the Secret in mongo-secret.example.yaml: %+v", c.Env)
	}

	// Each replica is named after its pod and advertises its pod's address.
	envs := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		envs[e.Name] = e
	}
	if id := envs["ARGUS_REPLICA_ID"]; id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("ARGUS_REPLICA_ID %+v, want the pod's name", id)
	}
	if ip := envs["POD_IP"]; ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" ||
		envs["ARGUS_ADVERTISE_URL"].Value != "http://$(POD_IP):9015" {
		t.Errorf("ARGUS_ADVERTISE_URL %+v (POD_IP %+v), want the pod's address", envs["ARGUS_ADVERTISE_URL"], ip)
	}
}

// checkOrchestratorService checks that the Service reaches the pod's ports.
func checkOrchestratorService(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	svc := typed[corev1.Service](t, find(t, objs, "Service", "argus-orchestrator"))
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select the pod labels %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	}
	// The REST API and EMCO's status notification gRPC service, each to the
	// container port of the same number.
	want := map[int32]bool{9015: true, 9016: true}
	got := map[int32]bool{}
	for _, p := range svc.Spec.Ports {
		if containerPort(c, p.TargetPort) != p.Port {
			t.Errorf("Service port %d goes to container port %d", p.Port, containerPort(c, p.TargetPort))
		}
		got[p.Port] = true
	}
	if !maps.Equal(got, want) || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service ports %+v type %s, want ClusterIP 9015 and 9016", svc.Spec.Ports, svc.Spec.Type)
	}
}

// The ha overlay: the same orchestrator, three replicas spread over nodes,
// at most one unavailable through voluntary disruptions.
func TestOrchestratorHAManifests(t *testing.T) {
	base, objs := kustomize(t, "orchestrator"), kustomize(t, "orchestrator-ha")
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "argus-orchestrator"))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Fatalf("replicas %v, want 3", d.Spec.Replicas)
	}
	// Only replicas and spreading differ from the base.
	bd := typed[appsv1.Deployment](t, find(t, base, "Deployment", "argus-orchestrator"))
	bd.Spec.Replicas, bd.Spec.Template.Spec.TopologySpreadConstraints = d.Spec.Replicas, d.Spec.Template.Spec.TopologySpreadConstraints
	if !reflect.DeepEqual(bd, d) {
		t.Errorf("the ha Deployment differs from the base beyond replicas and spreading")
	}
	spread := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(spread) != 1 || spread[0].TopologyKey != "kubernetes.io/hostname" || spread[0].LabelSelector == nil ||
		!reflect.DeepEqual(spread[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("topology spread %+v, want one per node over the Deployment's pods", spread)
	}
	pdb := typed[policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", "argus-orchestrator"))
	if pdb.Namespace != namespace || pdb.Spec.Selector == nil || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget %s/%s selects %+v, want the Deployment's pods", pdb.Namespace, pdb.Name, pdb.Spec.Selector)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1", pdb.Spec)
	}
	// Every other object is the base's.
	for _, o := range base {
		if o.GetKind() != "Deployment" {
			if !reflect.DeepEqual(o, find(t, objs, o.GetKind(), o.GetName())) {
				t.Errorf("%s %s differs from the base", o.GetKind(), o.GetName())
			}
		}
	}
}

// The monitor's manifests start the same image; its own tests cover the rest.
func TestMonitorManifestsRunTheImage(t *testing.T) {
	img := loadImage(t)
	d := typed[appsv1.Deployment](t, find(t, kustomize(t, "monitor"), "Deployment", "argus-monitor"))
	checkHardened(t, img, "monitor", d.Spec.Template.Spec)
}

func decodeFile(t *testing.T, rel ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeManifests([]byte(readFile(t, rel...)))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// warnings collects the API server's warning headers, which is how Pod
// Security admission reports a workload that breaks a namespace's
// pod-security.kubernetes.io/warn level.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

var _ rest.WarningHandler = (*warnings)(nil)

// TestOrchestratorManifestsDryRun server-side dry-runs every object of the
// orchestrator's kustomization, and the example Secret, on a real
// kube-apiserver: schema, defaulting and admission all apply; nothing is
// stored but the namespace. The monitor's Deployment joins the Pod Security
// check (the monitor's own tests dry-run the rest of its manifests).
func TestOrchestratorManifestsDryRun(t *testing.T) {
	objs := append(kustomize(t, "orchestrator"), decodeFile(t, "deployments", "kubernetes", "orchestrator", "mongo-secret.example.yaml")...)
	objs = append(objs, find(t, kustomize(t, "monitor"), "Deployment", "argus-monitor"))
	objs = append(objs, find(t, kustomize(t, "orchestrator-ha"), "PodDisruptionBudget", "argus-orchestrator"))
	set := testenv.Clusters(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var warned warnings
	cfg := rest.CopyConfig(set.Clusters[0].RESTConfig())
	cfg.WarningHandler = &warned

	// The namespace for real, so the namespaced objects can be dry-run into
	// it; labelled here (not in the shipped file) to warn about any pod
	// template that breaks the "restricted" Pod Security Standard.
	ns := find(t, objs, "Namespace", namespace).DeepCopy()
	labels := ns.GetLabels()
	labels["pod-security.kubernetes.io/warn"] = "restricted"
	ns.SetLabels(labels)
	if err := testenv.Apply(ctx, cfg, false, ns); err != nil {
		t.Fatal(err)
	}

	var others []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			others = append(others, o)
		}
	}
	if err := testenv.Apply(ctx, cfg, true, others...); err != nil {
		t.Fatal(err)
	}
	if w := warned.take(); len(w) > 0 {
		t.Errorf("the API server warned: %q", w)
	}

	// The warning check is live: a pod without its securityContext is flagged.
	bad := find(t, objs, "Deployment", "argus-orchestrator").DeepCopy()
	containers, _, _ := unstructured.NestedSlice(bad.Object, "spec", "template", "spec", "containers")
	delete(containers[0].(map[string]any), "securityContext")
	if err := unstructured.SetNestedSlice(bad.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Apply(ctx, cfg, true, bad); err != nil {
		t.Fatal(err)
	}
	if w := warned.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, `violate PodSecurity "restricted`) }) {
		t.Errorf("no Pod Security warning for a pod without securityContext: %q", w)
	}
}
