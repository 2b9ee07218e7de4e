package gac

import (
	"encoding/base64"
	"errors"
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

const netpol = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: netpol-db
spec:
  podSelector:
    matchLabels:
      role: db
`

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	o, err := decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// targets: app "web" on c1 (edge) and c2 (edge, core), app "db" on c1;
// each renders a StatefulSet "etcd" and a Deployment "web".
func targets(t *testing.T) []*Target {
	sts := "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: etcd}\nspec: {replicas: 3}\n"
	dep := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers: [{name: web, image: nginx}]\n"
	mk := func(app, name string, labels ...string) *Target {
		return &Target{App: app, Cluster: Cluster{Provider: "cp", Name: name, Labels: labels}, Objects: []*unstructured.Unstructured{obj(t, sts), obj(t, dep)}}
	}
	return []*Target{mk("web", "c1", "edge"), mk("web", "c2", "edge", "core"), mk("db", "c1", "edge")}
}

func jsonPatch(p string) catalog.CustomizationSpec {
	return catalog.CustomizationSpec{ClusterSpecific: "false", ClusterInfo: catalog.ClusterInfo{Scope: "label", ClusterProvider: "cp", Mode: "allow"},
		PatchType: "json", PatchJSON: catalog.JSONValue(p)}
}

func specific(scope, value, mode string, s catalog.CustomizationSpec) catalog.CustomizationSpec {
	s.ClusterSpecific = "true"
	s.ClusterInfo = catalog.ClusterInfo{Scope: scope, ClusterProvider: "cp", Mode: mode}
	if scope == "label" {
		s.ClusterInfo.ClusterLabel = value
	} else {
		s.ClusterInfo.Cluster = value
	}
	return s
}

func newRes(kind, name, file string, cs ...Customization) Resource {
	return Resource{Name: name, Spec: catalog.GACResourceSpec{App: "web", NewObject: "true",
		ResourceGVK: catalog.ResourceGVK{APIVersion: "v1", Kind: kind, Name: name}}, Template: []byte(file), Customizations: cs}
}

func existing(kind, name string, cs ...Customization) Resource {
	return Resource{Name: name, Spec: catalog.GACResourceSpec{App: "web", NewObject: "false",
		ResourceGVK: catalog.ResourceGVK{APIVersion: "apps/v1", Kind: kind, Name: name}}, Customizations: cs}
}

// applyCase is one customization applied to the test's targets: check
// looks at what it did, or err is the Invalid error it gives.
type applyCase struct {
	res   []Resource
	check func(t *testing.T, ts []*Target)
	err   string
}

// applyPatches are customizations that apply.
func applyPatches() map[string]applyCase {
	roleDB := `[{"op":"replace","path":"/spec/podSelector/matchLabels/role","value":"database"}]`
	return map[string]applyCase{
		"new object, JSON patch, on the clusters with a label": {
			res: []Resource{newRes("networkpolicy", "netpol-db", netpol, Customization{Name: "c", Spec: specific("label", "edge", "allow", jsonPatch(roleDB))})},
			check: func(t *testing.T, ts []*Target) {
				for _, tg := range ts[:2] {
					o := tg.Objects[find(tg.Objects, "NetworkPolicy", "netpol-db")]
					if v, _, _ := unstructured.NestedString(o.Object, "spec", "podSelector", "matchLabels", "role"); v != "database" {
						t.Errorf("%s: role = %q", tg.Cluster.Name, v)
					}
				}
				if find(ts[2].Objects, "NetworkPolicy", "netpol-db") >= 0 {
					t.Error("added to an app the resource is not for")
				}
			},
		},
		"deny mode keeps the clusters without the label": {
			res: []Resource{newRes("NetworkPolicy", "netpol-db", netpol, Customization{Name: "c", Spec: specific("label", "core", "deny", jsonPatch(roleDB))})},
			check: func(t *testing.T, ts []*Target) {
				if find(ts[0].Objects, "NetworkPolicy", "netpol-db") < 0 || find(ts[1].Objects, "NetworkPolicy", "netpol-db") >= 0 {
					t.Error("deny core: want on c1 only")
				}
			},
		},
		"scope name": {
			res: []Resource{newRes("NetworkPolicy", "netpol-db", netpol, Customization{Name: "c", Spec: specific("name", "c2", "allow", catalog.CustomizationSpec{})})},
			check: func(t *testing.T, ts []*Target) {
				if find(ts[0].Objects, "NetworkPolicy", "netpol-db") >= 0 || find(ts[1].Objects, "NetworkPolicy", "netpol-db") < 0 {
					t.Error("name c2: want on c2 only")
				}
			},
		},
		"without customizations nothing happens": {
			res: []Resource{newRes("NetworkPolicy", "netpol-db", netpol)},
			check: func(t *testing.T, ts []*Target) {
				if len(ts[0].Objects) != 2 {
					t.Error("a resource without customization was added")
				}
			},
		},
		"existing object patched": {
			res: []Resource{existing("StatefulSet", "etcd", Customization{Name: "c", Spec: jsonPatch(`[{"op":"replace","path":"/spec/replicas","value":1}]`)})},
			check: func(t *testing.T, ts []*Target) {
				for _, tg := range ts[:2] {
					if n, _, _ := unstructured.NestedInt64(tg.Objects[0].Object, "spec", "replicas"); n != 1 {
						t.Errorf("%s: replicas %d", tg.Cluster.Name, n)
					}
				}
				if n, _, _ := unstructured.NestedInt64(ts[2].Objects[0].Object, "spec", "replicas"); n != 3 {
					t.Error("another app's object was patched")
				}
			},
		},
		"strategic merge adds a container": {
			res: []Resource{existing("Deployment", "web", Customization{Name: "c", Spec: catalog.CustomizationSpec{ClusterSpecific: "false", PatchType: "merge"},
				Files: []catalog.File{{Name: "p.yaml", Content: []byte("spec:\n  template:\n    spec:\n      containers: [{name: redis, image: redis}]\n")}}})},
			check: func(t *testing.T, ts []*Target) {
				cs, _, _ := unstructured.NestedSlice(ts[0].Objects[1].Object, "spec", "template", "spec", "containers")
				if len(cs) != 2 {
					t.Errorf("containers = %v, want web and redis", cs)
				}
			},
		},
		"ConfigMap from files with key names, then a JSON patch": {
			res: []Resource{newRes("ConfigMap", "cm-team", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-team}\ndata: {team_size: \"5\"}\n",
				Customization{Name: "c", Spec: func() catalog.CustomizationSpec {
					s := jsonPatch(`[{"op":"replace","path":"/data/team_size","value":"10"}]`)
					s.ConfigMapOptions.DataKeyOptions = []catalog.KeyOption{{FileName: "game.txt", KeyName: "game.properties"}}
					return s
				}(), Files: []catalog.File{{Name: "game.txt", Content: []byte("lives=5")}, {Name: "info.json", Content: []byte("{}")}}})},
			check: func(t *testing.T, ts []*Target) {
				o := ts[0].Objects[find(ts[0].Objects, "ConfigMap", "cm-team")]
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				if data["team_size"] != "10" || data["game.properties"] != "lives=5" || data["info.json"] != "{}" {
					t.Errorf("data = %v", data)
				}
			},
		},
		"Secret without a file, data base64-encoded": {
			res: []Resource{newRes("Secret", "s1", "", Customization{Name: "c", Spec: catalog.CustomizationSpec{ClusterSpecific: "false"},
				Files: []catalog.File{{Name: "pw", Content: []byte("hunter2")}}})},
			check: func(t *testing.T, ts []*Target) {
				o := ts[0].Objects[find(ts[0].Objects, "Secret", "s1")]
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				if data["pw"] != base64.StdEncoding.EncodeToString([]byte("hunter2")) || o.Object["type"] != "Opaque" {
					t.Errorf("secret = %v", o.Object)
				}
			},
		},
	}
}

// applyRefusals are customizations refused as invalid.
func applyRefusals() map[string]applyCase {
	return map[string]applyCase{
		"an existing object the app does not render": {
			res: []Resource{existing("StatefulSet", "nope", Customization{Name: "c", Spec: jsonPatch(`[{"op":"remove","path":"/spec"}]`)})},
			err: `renders no StatefulSet "nope"`,
		},
		"a new object of another kind needs a file": {
			res: []Resource{newRes("NetworkPolicy", "np", "", Customization{Name: "c", Spec: catalog.CustomizationSpec{ClusterSpecific: "false"}})},
			err: "needs a resource file",
		},
		"a file of another kind than resourceGVK says": {
			res: []Resource{newRes("Service", "netpol-db", netpol, Customization{Name: "c", Spec: catalog.CustomizationSpec{ClusterSpecific: "false"}})},
			err: "holds a NetworkPolicy",
		},
		"a patch that does not apply": {
			res: []Resource{existing("StatefulSet", "etcd", Customization{Name: "c", Spec: jsonPatch(`[{"op":"replace","path":"/spec/nothing/there","value":1}]`)})},
			err: "apply patchJson",
		},
	}
}

func TestApply(t *testing.T) {
	cases := applyPatches()
	maps.Copy(cases, applyRefusals())
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ts := targets(t)
			err := Apply(c.res, ts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("err = %v, want Invalid containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, ts)
		})
	}
}

func TestValidatePatch(t *testing.T) {
	cases := map[string]struct {
		spec catalog.CustomizationSpec
		ok   bool
	}{
		"none":               {catalog.CustomizationSpec{}, true},
		"json":               {jsonPatch(`[{"op":"add","path":"/a","value":1}]`), true},
		"merge":              {catalog.CustomizationSpec{PatchType: "merge"}, true},
		"json without ops":   {jsonPatch(`[]`), false},
		"not a patch":        {jsonPatch(`{"op":"add"}`), false},
		"unknown type":       {catalog.CustomizationSpec{PatchType: "strategic"}, false},
		"URL lookup":         {jsonPatch(`[{"op":"add","path":"/a","value":"$(http://10.0.0.1/v)$"}]`), false},
		"patch without type": {catalog.CustomizationSpec{PatchJSON: catalog.JSONValue(`[{"op":"add","path":"/a","value":1}]`)}, false},
	}
	for name, c := range cases {
		if err := ValidatePatch(c.spec); (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok %v", name, err, c.ok)
		}
	}
}
