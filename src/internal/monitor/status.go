package monitor

import (
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/health"
)

const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// hashKey holds, in a cached object, the hash of the fields Argus's
// server-side apply manages (syncstate.Hash), computed before the managed
// fields were stripped. No Kubernetes object has such a top-level field;
// it is never reported as part of the object.
const hashKey = "argus.io/managed-fields-hash"

func hashOf(o *unstructured.Unstructured) string {
	h, _ := o.Object[hashKey].(string)
	return h
}

// Trim levels, applied in order until the status fits (SPEC section 2).
const (
	trimNone         = iota
	trimLastApplied  // drop last-applied-configuration annotations
	trimPodSpec      // drop Pod specs
	trimPodToEssence // Pods keep name, phase, conditions and container readiness
	trimLevels
)

// reasonItems bounds how many not-ready objects status.reason names.
const reasonItems = 5

// buildStatus computes a bundle's status from the objects it selects and the
// kinds that cannot be watched. It trims entries until the status marshals to
// at most maxBytes. It is a pure function of its arguments.
func buildStatus(objs []*unstructured.Unstructured, unwatched []v1alpha1.KindCondition, generation int64, maxBytes int) (v1alpha1.ResourceBundleStateStatus, error) {
	objs = dedupe(objs)
	var st v1alpha1.ResourceBundleStateStatus
	for level := trimNone; level < trimLevels; level++ {
		var err error
		st, err = statusAt(objs, unwatched, generation, level)
		if err != nil {
			return st, err
		}
		data, err := json.Marshal(st)
		if err != nil {
			return st, err
		}
		if len(data) <= maxBytes {
			return st, nil
		}
	}
	// Even the essentials do not fit; the write will fail and say so.
	return st, nil
}

// dedupe keeps one object per group/kind/namespace/name (a kind may be
// watched at two versions) and sorts them for stable lists.
func dedupe(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	seen := map[string]bool{}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		k := objectKey(o)
		if !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return objectKey(out[i]) < objectKey(out[j]) })
	return out
}

func objectKey(o *unstructured.Unstructured) string {
	gk := o.GroupVersionKind().GroupKind()
	return gk.Kind + "." + gk.Group + "/" + o.GetNamespace() + "/" + o.GetName()
}

func statusAt(objs []*unstructured.Unstructured, unwatched []v1alpha1.KindCondition, generation int64, level int) (v1alpha1.ResourceBundleStateStatus, error) {
	st := v1alpha1.ResourceBundleStateStatus{
		ObservedGeneration: generation,
		FieldsHashed:       true,
		Trimmed:            level > trimNone,
		UnwatchedKinds:     append([]v1alpha1.KindCondition{}, unwatched...),
	}
	lists := map[string]*[]v1alpha1.ResourceStatus{
		"podStatuses":                   &st.PodStatuses,
		"deploymentStatuses":            &st.DeploymentStatuses,
		"serviceStatuses":               &st.ServiceStatuses,
		"configMapStatuses":             &st.ConfigMapStatuses,
		"secretStatuses":                &st.SecretStatuses,
		"daemonSetStatuses":             &st.DaemonSetStatuses,
		"ingressStatuses":               &st.IngressStatuses,
		"jobStatuses":                   &st.JobStatuses,
		"statefulSetStatuses":           &st.StatefulSetStatuses,
		"replicaSetStatuses":            &st.ReplicaSetStatuses,
		"persistentVolumeClaimStatuses": &st.PersistentVolumeClaimStatuses,
		"cronJobStatuses":               &st.CronJobStatuses,
	}
	// Every list is written, empty or not: the status is replaced whole.
	for _, l := range lists {
		*l = []v1alpha1.ResourceStatus{}
	}
	st.ResourceStatuses = []v1alpha1.CustomResourceStatus{}

	items := make([]health.Item, 0, len(objs)+len(unwatched))
	statuses := make([]health.Status, 0, len(objs)+len(unwatched))
	for _, o := range objs {
		res := health.Evaluate(o)
		items = append(items, health.Item{Kind: o.GetKind(), Name: o.GetName(), Result: res})
		statuses = append(statuses, res.Status)
		gvk := o.GroupVersionKind()
		list := listFor(gvk.GroupKind())
		if list == "" {
			obj, err := rawJSON(trimObject(o, level))
			if err != nil {
				return st, err
			}
			st.ResourceStatuses = append(st.ResourceStatuses, v1alpha1.CustomResourceStatus{
				Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
				Name: o.GetName(), Namespace: o.GetNamespace(),
				Object: obj, ReadyStatus: string(res.Status), Reason: res.Reason, ManagedFieldsHash: hashOf(o),
			})
			continue
		}
		entry, err := typedEntry(o, level, res)
		if err != nil {
			return st, err
		}
		*lists[list] = append(*lists[list], entry)
	}
	for _, k := range unwatched {
		items = append(items, health.Item{Kind: "kind", Name: formatGVK(schemaGVK(k.GroupVersionKind)),
			Result: health.Result{Status: health.Unknown, Reason: k.Reason}})
		statuses = append(statuses, health.Unknown)
	}
	st.ResourceCount = int32(len(objs))
	st.Ready = health.Aggregate(statuses...) == health.Ready
	st.Reason = health.Summarize(items, reasonItems)
	return st, nil
}

// trimObject returns the parts of o kept at a trim level, without ever
// touching o (it lives in an informer cache).
func trimObject(o *unstructured.Unstructured, level int) map[string]any {
	out := make(map[string]any, len(o.Object))
	for k, v := range o.Object {
		if k != hashKey {
			out[k] = v
		}
	}
	meta, _ := o.Object["metadata"].(map[string]any)
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	// A Secret's last-applied-configuration holds its data: never kept.
	isSecret := o.GetKind() == "Secret" && o.GroupVersionKind().Group == ""
	if level >= trimLastApplied || isSecret {
		if ann, ok := m["annotations"].(map[string]any); ok {
			if _, has := ann[lastAppliedAnnotation]; has {
				a := make(map[string]any, len(ann))
				for k, v := range ann {
					if k != lastAppliedAnnotation {
						a[k] = v
					}
				}
				m["annotations"] = a
			}
		}
	}
	out["metadata"] = m
	if isSecret {
		delete(out, "data")
		delete(out, "stringData")
	}
	isPod := o.GetKind() == "Pod" && o.GroupVersionKind().Group == ""
	if isPod && level >= trimPodSpec {
		delete(out, "spec")
	}
	if isPod && level >= trimPodToEssence {
		out["metadata"] = map[string]any{"name": o.GetName(), "namespace": o.GetNamespace()}
		out["status"] = podEssence(o)
	}
	return out
}

// podEssence is a Pod's phase, conditions and container readiness.
func podEssence(o *unstructured.Unstructured) map[string]any {
	st := map[string]any{}
	if phase, _, _ := unstructured.NestedString(o.Object, "status", "phase"); phase != "" {
		st["phase"] = phase
	}
	if conds, ok, _ := unstructured.NestedSlice(o.Object, "status", "conditions"); ok {
		slim := make([]any, 0, len(conds))
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok {
				slim = append(slim, map[string]any{"type": m["type"], "status": m["status"]})
			}
		}
		st["conditions"] = slim
	}
	if cs, ok, _ := unstructured.NestedSlice(o.Object, "status", "containerStatuses"); ok {
		slim := make([]any, 0, len(cs))
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				slim = append(slim, map[string]any{"name": m["name"], "ready": m["ready"]})
			}
		}
		st["containerStatuses"] = slim
	}
	return st
}

func typedEntry(o *unstructured.Unstructured, level int, res health.Result) (v1alpha1.ResourceStatus, error) {
	parts := trimObject(o, level)
	e := v1alpha1.ResourceStatus{
		APIVersion: o.GetAPIVersion(), Kind: o.GetKind(),
		ReadyStatus: string(res.Status), Reason: res.Reason, ManagedFieldsHash: hashOf(o),
	}
	var err error
	if e.Metadata, err = rawJSON(parts["metadata"]); err != nil {
		return e, err
	}
	for _, f := range []struct {
		name string
		dst  **runtime.RawExtension
	}{{"spec", &e.Spec}, {"status", &e.Status}} {
		if v, ok := parts[f.name]; ok && v != nil {
			raw, err := rawJSON(v)
			if err != nil {
				return e, err
			}
			*f.dst = &raw
		}
	}
	return e, nil
}

func rawJSON(v any) (runtime.RawExtension, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return runtime.RawExtension{}, fmt.Errorf("encode entry: %w", err)
	}
	return runtime.RawExtension{Raw: data}, nil
}
