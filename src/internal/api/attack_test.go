package api

import (
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/gac"
)

// TestGACUploadsAreBounded: GAC files become Kubernetes objects copied to
// every cluster of their app, so an upload larger than any object could be
// is refused at the door (it used to be stored and cloned per cluster).
func TestGACUploadsAreBounded(t *testing.T) {
	f := newFixture(t)
	dig := "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups/d1"
	for _, s := range []struct{ path, body string }{
		{"/v2/projects", `{"metadata":{"name":"p1"}}`},
		{"/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups", `{"metadata":{"name":"d1"},"spec":{"compositeProfile":"cp","version":"r1"}}`},
		{dig + "/generic-k8s-intents", `{"metadata":{"name":"g1"}}`},
	} {
		if code, body, _ := f.do(t, "POST", s.path, s.body); code != 201 {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
	}
	res := dig + "/generic-k8s-intents/g1/resources"
	half := strings.Repeat("x", gac.MaxObjectBytes/2+1)
	many := strings.Repeat(`{"op":"test","path":"/kind","value":"ConfigMap"},`, gac.MaxPatchOps) + `{"op":"test","path":"/kind","value":"ConfigMap"}`
	for _, u := range []struct {
		name, path, meta, part string
		files                  map[string]string
		code                   int
		has                    string
	}{
		{"template", res, `{"metadata":{"name":"cm"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", map[string]string{"cm.yaml": "kind: ConfigMap\n#" + half + half}, 413, "more than"},
		{"resource", res, `{"metadata":{"name":"cm"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", nil, 201, ""},
		{"files", res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"}}}`,
			"files", map[string]string{"a.txt": half, "b.txt": half}, 413, "more than"},
		{"operations", res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"},
			"patchType":"json","patchJson":[` + many + `]}}`, "files", nil, 400, "operations"},
	} {
		body, hdr := filesBody(t, u.meta, u.part, u.files)
		code, got, _ := f.send(t, "POST", u.path, body, hdr)
		if code != u.code || !strings.Contains(got, u.has) {
			t.Errorf("%s: got %d %.200q, want %d containing %q", u.name, code, got, u.code, u.has)
		}
	}
}
