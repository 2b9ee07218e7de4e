package rsync

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

// bundleLabels are the labels rsync puts on every object of an app.
func bundleLabels(statusID, app string) map[string]string {
	return map[string]string{
		v1alpha1.LabelDeploymentID: DeploymentID(statusID, app),
		v1alpha1.LabelContextID:    statusID,
		v1alpha1.LabelApp:          app,
	}
}

// DeploymentID is the emco/deployment-id value: "<status-context-id>-<app>".
func DeploymentID(statusID, app string) string { return statusID + "-" + app }

// BundleName names an app's ResourceBundleState: "<app>-<context-id>",
// lower-cased with "_" as "-", hashed when longer than a DNS label.
func BundleName(app, statusID string) string {
	n := strings.ReplaceAll(strings.ToLower(app+"-"+statusID), "_", "-")
	if len(n) > 63 {
		sum := sha256.Sum256([]byte(n))
		n = n[:50] + "-" + hex.EncodeToString(sum[:])[:12]
	}
	return n
}

// DecorateInstance adds k8splugin's instance label to a v1 instance's
// object and to the pod and volume claim templates it carries, as
// k8splugin does, so k8splugin's clients and tools find them by it.
func DecorateInstance(obj *unstructured.Unstructured, id string) {
	decorate(obj, map[string]string{v1alpha1.LabelRBInstanceID: id})
}

// decorate adds the bundle labels to obj and to the pod and volume claim
// templates of workloads, so Pods and PVCs they create are tracked too.
func decorate(obj *unstructured.Unstructured, labels map[string]string) {
	setLabels(obj.Object, labels, "metadata", "labels")
	var templates [][]string
	switch obj.GetKind() {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
		templates = [][]string{{"spec", "template", "metadata", "labels"}}
	case "CronJob":
		templates = [][]string{{"spec", "jobTemplate", "spec", "template", "metadata", "labels"},
			{"spec", "jobTemplate", "metadata", "labels"}}
	}
	for _, path := range templates {
		setLabels(obj.Object, labels, path...)
	}
	if obj.GetKind() == "StatefulSet" {
		vcts, found, _ := unstructured.NestedSlice(obj.Object, "spec", "volumeClaimTemplates")
		if found {
			for i, v := range vcts {
				if m, ok := v.(map[string]any); ok {
					setLabels(m, labels, "metadata", "labels")
					vcts[i] = m
				}
			}
			_ = unstructured.SetNestedSlice(obj.Object, vcts, "spec", "volumeClaimTemplates")
		}
	}
}

// setAnnotation sets one annotation on obj's metadata.
func setAnnotation(obj *unstructured.Unstructured, key, value string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
}

func setLabels(obj map[string]any, labels map[string]string, path ...string) {
	existing, _, _ := unstructured.NestedStringMap(obj, path...)
	if existing == nil {
		existing = map[string]string{}
	}
	for k, v := range labels {
		existing[k] = v
	}
	_ = unstructured.SetNestedStringMap(obj, existing, path...)
}
