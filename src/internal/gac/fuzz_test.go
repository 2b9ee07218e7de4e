package gac

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// FuzzApply feeds caller-given files and patches — the resource file, a
// JSON patch, a merge patch file — through Apply: whatever they hold, it
// returns an error or a plan, and never panics.
func FuzzApply(f *testing.F) {
	f.Add([]byte(netpol), `[{"op":"replace","path":"/spec/podSelector/matchLabels/role","value":"database"}]`, []byte("spec: {replicas: 2}"), "NetworkPolicy", true)
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n"), `[{"op":"remove","path":"/data"}]`, []byte("data: {c: d}"), "ConfigMap", true)
	f.Add([]byte(""), `[]`, []byte("{"), "Secret", true)
	f.Add([]byte("- a\n- b"), `{"op":1}`, []byte("spec:\n  template: 3"), "StatefulSet", false)
	f.Fuzz(func(t *testing.T, template []byte, patchJSON string, mergeFile []byte, kind string, isNew bool) {
		newObj := "false"
		if isNew {
			newObj = "true"
		}
		for _, pt := range []string{"json", "merge", ""} {
			spec := catalog.CustomizationSpec{ClusterSpecific: "false", PatchType: pt, PatchJSON: catalog.JSONValue(patchJSON)}
			r := Resource{Name: "r", Spec: catalog.GACResourceSpec{App: "web", NewObject: newObj,
				ResourceGVK: catalog.ResourceGVK{APIVersion: "v1", Kind: kind, Name: "etcd"}}, Template: template,
				Customizations: []Customization{{Name: "c", Spec: spec, Files: []catalog.File{{Name: "f", Content: mergeFile}}}}}
			sts := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet",
				"metadata": map[string]any{"name": "etcd"}, "spec": map[string]any{"replicas": int64(3)}}}
			_ = Apply([]Resource{r}, []*Target{{App: "web", Cluster: Cluster{Provider: "cp", Name: "c1"}, Objects: []*unstructured.Unstructured{sts}}})
		}
	})
}
