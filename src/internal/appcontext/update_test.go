package appcontext

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMergeForUpdate(t *testing.T) {
	c1 := ClusterRef{Provider: "cp", Name: "c1"}
	c2 := ClusterRef{Provider: "cp", Name: "c2"}
	res := func(name string) Resource {
		return Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Namespace: "default"}
	}
	old := &Context{Placements: []*Placement{
		{App: "a", Cluster: c1, Resources: []Resource{res("keep"), res("drop"), res("gone")},
			Statuses: map[string]ResourceStatus{res("gone").Key(): {Status: RsyncDeleted}}},
		{App: "a", Cluster: c2, Resources: []Resource{res("keep")}},
	}}
	fresh := []*Placement{{App: "a", Cluster: c1, Resources: []Resource{res("keep"), res("new")}}}
	got := MergeForUpdate(old, fresh)
	summary := map[string][]string{}
	for _, p := range got {
		for _, r := range p.Resources {
			s := r.Name
			if r.Removed {
				s += "(removed)"
			}
			summary[p.Cluster.Name] = append(summary[p.Cluster.Name], s)
		}
	}
	if want := "keep new drop(removed)"; strings.Join(summary["c1"], " ") != want {
		t.Errorf("c1 = %v, want %s (an already deleted resource is not deleted again)", summary["c1"], want)
	}
	if want := "keep(removed)"; strings.Join(summary["c2"], " ") != want {
		t.Errorf("c2 = %v, want %s (a placement no longer planned is removed whole)", summary["c2"], want)
	}
}
