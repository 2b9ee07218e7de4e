package render

import (
	"encoding/json"
	"maps"
	"path"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/bson"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// FuzzOverrideValues takes a DIG spec's JSON as a caller sends it: whatever
// decodes survives the store's encoding unchanged, and applying its values
// with Helm's --set semantics never panics and ends the same way however
// the map is ordered.
func FuzzOverrideValues(f *testing.F) {
	f.Add([]byte(`{"compositeProfile":"cp","overrideValues":[{"app":"web","values":{"image.repository":"x","service.port":"8080"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"$x":"1","a\\.b":"2","l[0].n":"v","a":"1,b=2"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"a":"1","a.b":"2"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"x[999999]":"1"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec catalog.DIGSpec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		b, err := bson.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal %+v: %v", spec, err)
		}
		var back catalog.DIGSpec
		if err := bson.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if len(back.OverrideValues) != len(spec.OverrideValues) {
			t.Fatalf("round trip lost entries: %+v → %+v", spec, back)
		}
		for i, ov := range spec.OverrideValues {
			if !maps.Equal(ov.Values, back.OverrideValues[i].Values) {
				t.Fatalf("round trip changed %v into %v", ov.Values, back.OverrideValues[i].Values)
			}
			v1, err1 := Values(nil, ov.Values)
			v2, err2 := Values(nil, back.OverrideValues[i].Values)
			j1, _ := json.Marshal(v1)
			j2, _ := json.Marshal(v2)
			if (err1 == nil) != (err2 == nil) || string(j1) != string(j2) {
				t.Fatalf("values differ between runs: %s / %s, %v / %v", j1, j2, err1, err2)
			}
		}
	})
}

// FuzzProfileConfigResource takes a profile's configresource entry as an
// uploader writes it: reading the profile and copying its file over a
// chart never panics, and never writes outside the chart's directory nor
// to a path that climbs out of the archive.
func FuzzProfileConfigResource(f *testing.F) {
	for _, s := range [][2]string{{"cm.yaml", "web/templates/cm.yaml"}, {"../../etc/passwd", "web/x"}, {"cm.yaml", "/etc/passwd"},
		{"cm.yaml", "web/../../x"}, {"./cm.yaml", "templates/x.yaml"}, {"cm.yaml", "web/templates/../../../x"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filepath, chartpath string) {
		manifest, err := yaml.Marshal(map[string]any{"type": map[string]any{"configresource": []any{
			map[string]any{"filepath": filepath, "chartpath": chartpath}}}})
		if err != nil {
			return
		}
		profile, err := ReadProfile(tgz.Files(t, map[string]string{"manifest.yaml": string(manifest), "cm.yaml": "x"}), archive.Limits{})
		if err != nil {
			return
		}
		for _, root := range []string{"web", ""} {
			files := map[string][]byte{path.Join(root, "Chart.yaml"): nil, "web/templates/a.yaml": nil}
			if overlay(files, root, profile.Resources) != nil {
				continue
			}
			for name := range files {
				if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "/../") ||
					(root != "" && !strings.HasPrefix(name, root+"/")) {
					t.Fatalf("configresource %q → %q wrote %q (chart root %q)", filepath, chartpath, name, root)
				}
			}
		}
	})
}
