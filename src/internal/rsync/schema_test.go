package rsync

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"
)

func testSchema(t *testing.T) *gvSchema {
	t.Helper()
	var doc spec3.OpenAPI
	if err := json.Unmarshal([]byte(daemonSetSchema), &doc); err != nil {
		t.Fatal(err)
	}
	g, err := newGVSchema(doc.Components.Schemas)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Unknown fields are pruned wherever they are (maps of declared fields,
// list items), free-form maps are kept, and what remains is validated.
func TestSchemaCheck(t *testing.T) {
	g := testSchema(t)
	ds := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}
	obj := map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "ds", "labels": map[string]any{"any": "label"}, "bogus": true},
		"spec": map[string]any{"replicas": int64(2), "selector": map[string]any{"a": "b"},
			"containers": []any{map[string]any{"name": "c", "image": "i", "bogus": int64(1)}}}}
	dropped, known, err := g.check(ds, obj)
	if !known || err != nil {
		t.Fatalf("check: known %v, %v", known, err)
	}
	want := []string{"metadata.bogus", "spec.containers[0].bogus", "spec.replicas"}
	if !reflect.DeepEqual(dropped, want) {
		t.Fatalf("dropped %q, want %q", dropped, want)
	}
	if _, ok := obj["spec"].(map[string]any)["replicas"]; ok {
		t.Fatal("spec.replicas is still there")
	}
	if l := obj["metadata"].(map[string]any)["labels"].(map[string]any); l["any"] != "label" {
		t.Fatal("a free-form map lost its keys")
	}

	// A value of the wrong type is not prunable: the object is refused.
	bad := map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "ds"},
		"spec": map[string]any{"minReadySeconds": "soon"}}
	_, _, err = g.check(ds, bad)
	var se errSchema
	if !errors.As(err, &se) || len(se.errs) == 0 {
		t.Fatalf("a string for an integer: %v", err)
	}
	if _, known, _ := g.check(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, map[string]any{}); known {
		t.Fatal("a kind the schema lacks is known")
	}
}
