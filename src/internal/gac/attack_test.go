package gac

import (
	"fmt"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// copyBomb is a JSON patch of a few KiB whose copies double an object n
// times: unbounded, 18 of them built a 259 MiB ConfigMap (4.5 GiB of
// allocations) in the orchestrator, and a few more ended it.
func copyBomb(n int) string {
	ops := []string{`{"op":"add","path":"/data","value":{}}`,
		`{"op":"add","path":"/data/b","value":{"x":"` + strings.Repeat("x", 1024) + `"}}`}
	for i := range n {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data/b","path":"/data/b/c%d"}`, i))
	}
	return "[" + strings.Join(ops, ",") + "]"
}

func TestPatchesAreBounded(t *testing.T) {
	newCM := func(spec catalog.CustomizationSpec, files ...catalog.File) Resource {
		return Resource{Name: "r", Spec: catalog.GACResourceSpec{App: "web", NewObject: "true",
			ResourceGVK: catalog.ResourceGVK{APIVersion: "v1", Kind: "ConfigMap", Name: "cm"}},
			Customizations: []Customization{{Name: "c", Spec: spec, Files: files}}}
	}
	merge := catalog.CustomizationSpec{ClusterSpecific: "false", PatchType: "merge",
		ConfigMapOptions: catalog.DataKeyOptions{DataKeyOptions: []catalog.KeyOption{{FileName: "p.yaml", MergePatch: "true"}}}}
	cases := map[string]struct {
		r   Resource
		has string
	}{
		"60 copies":             {newCM(jsonPatch(copyBomb(60))), "copy"},
		"a merge patch too big": {newCM(merge, catalog.File{Name: "p.yaml", Content: []byte(`{"data":{"a":"` + strings.Repeat("y", MaxObjectBytes) + `"}}`)}), "more than"},
		"too many operations":   {newCM(jsonPatch("[" + strings.Repeat(`{"op":"test","path":"/kind","value":"ConfigMap"},`, MaxPatchOps) + `{"op":"test","path":"/kind","value":"ConfigMap"}]`)), "operations"},
	}
	for name, c := range cases {
		tg := &Target{App: "web", Cluster: Cluster{Provider: "cp", Name: "c1"}}
		err := Apply([]Resource{c.r}, []*Target{tg})
		if err == nil || !strings.Contains(err.Error(), c.has) {
			t.Errorf("%s: err = %v, want one naming %q", name, err, c.has)
		}
		if len(tg.Objects) != 0 {
			t.Errorf("%s: the plan got %d objects", name, len(tg.Objects))
		}
	}
	// A few copies within the bound still work, as EMCO users write them.
	tg := &Target{App: "web", Cluster: Cluster{Provider: "cp", Name: "c1"}}
	if err := Apply([]Resource{newCM(jsonPatch(copyBomb(3)))}, []*Target{tg}); err != nil || len(tg.Objects) != 1 {
		t.Fatalf("3 copies: %v, %d objects", err, len(tg.Objects))
	}
	if err := ValidatePatch(jsonPatch("[" + strings.Repeat(`{"op":"remove","path":"/a"},`, MaxPatchOps) + `{"op":"remove","path":"/a"}]`)); err == nil {
		t.Error("ValidatePatch accepted more than MaxPatchOps operations")
	}
}
