package api

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// multipartBody is an EMCO upload: metadata plus files under part.
func filesBody(t *testing.T, meta string, part string, files map[string]string) (*bytes.Buffer, map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("metadata", meta)
	for name, content := range files {
		fw, _ := mw.CreateFormFile(part, name)
		_, _ = fw.Write([]byte(content))
	}
	_ = mw.Close()
	return &buf, map[string]string{"Content-Type": mw.FormDataContentType()}
}

func TestEMCOCatalogue(t *testing.T) {
	f := newFixture(t)
	dig := "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups/d1"
	for _, s := range []struct{ path, body string }{
		{"/v2/projects", `{"metadata":{"name":"p1"}}`},
		{"/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups", `{"metadata":{"name":"d1"},"spec":{"compositeProfile":"cp","version":"r1","logicalCloud":"lc1"}}`},
		{dig + "/generic-k8s-intents", `{"metadata":{"name":"g1"}}`},
		{"/v2/cluster-providers", `{"metadata":{"name":"cp"}}`},
	} {
		if code, body, _ := f.do(t, "POST", s.path, s.body); code != 201 {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
	}
	lc := "/v2/projects/p1/logical-clouds"
	steps := []struct {
		method, path, body string
		code               int
		bodyHas            string
	}{
		{"POST", "/v2/controllers", `{"metadata":{"name":"rsync"},"spec":{"host":"h","port":30431}}`, 201, `"port":30431`},
		{"POST", "/v2/controllers", `{"metadata":{"name":"gac"},"spec":{"host":"h","port":1,"type":"action","priority":1}}`, 201, `"type":"action"`},
		{"POST", "/v2/controllers", `{"metadata":{"name":"x"},"spec":{"type":"sidecar"}}`, 400, "action, placement"},
		{"GET", "/v2/controllers", "", 200, `"name":"rsync"`},
		{"POST", "/v2/dtc-controllers", `{"metadata":{"name":"nps"},"spec":{"host":"h","port":2,"type":"action","priority":1}}`, 201, "nps"},
		{"POST", dig + "/intents", `{"metadata":{"name":"i"},"spec":{"intent":{"genericPlacementIntent":"g","dtc":"t"}}}`, 400, `controller "dtc"`},
		{"POST", dig + "/intents", `{"metadata":{"name":"i"},"spec":{"intent":{"genericPlacementIntent":"g","gac":"g1"}}}`, 201, `"gac":"g1"`},
		{"POST", lc, `{"metadata":{"name":"lc1"},"spec":{"namespace":"ns1","user":{"userName":"u1","type":"certificate"}}}`, 201, `"level":"1"`},
		{"POST", lc, `{"metadata":{"name":"lc2"},"spec":{"level":"2"}}`, 400, "level"},
		{"POST", lc, `{"metadata":{"name":"lc3"},"spec":{"namespace":"Not_A_NS","user":{"userName":"u"}}}`, 400, "namespace"},
		{"POST", lc, `{"metadata":{"name":"admin"},"spec":{"level":"0"}}`, 201, `"level":"0"`},
		{"POST", lc + "/lc1/cluster-references", `{"metadata":{"name":"r1"},"spec":{"clusterProvider":"cp","cluster":"c9"}}`, 400, "not found"},
		{"POST", lc + "/lc1/user-permissions", `{"metadata":{"name":"up"},"spec":{"namespace":"ns1","apiGroups":["*"],"resources":["*"],"verbs":["*"]}}`, 201, `"verbs":["*"]`},
		{"POST", lc + "/lc1/cluster-quotas", `{"metadata":{"name":"q1"},"spec":{"limits.cpu":"2","count/deployments.apps":"5"}}`, 201, `"limits.cpu":"2"`},
		{"GET", lc + "/lc1/cluster-quotas/q1", "", 200, `"count/deployments.apps":"5"`},
		{"POST", lc + "/lc1/cluster-quotas", `{"metadata":{"name":"q2"},"spec":{"pods":"lots"}}`, 400, "lots"},
		{"PUT", lc + "/lc1", `{"metadata":{"name":"lc1"},"spec":{"namespace":"ns1","labels":{"a.b/c":"d"},"user":{"userName":"u1"}}}`, 200, `"a.b/c":"d"`},
		{"DELETE", lc + "/lc1", "", 409, "still has"},
	}
	for _, s := range steps {
		code, body, _ := f.do(t, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.bodyHas) {
			t.Fatalf("%s %s: got %d %q, want %d containing %q", s.method, s.path, code, body, s.code, s.bodyHas)
		}
	}

	res := dig + "/generic-k8s-intents/g1/resources"
	uploads := []struct {
		path, meta, part string
		files            map[string]string
		code             int
		bodyHas          string
	}{
		{res, `{"metadata":{"name":"np"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","name":"np"}}}`,
			"file", nil, 400, "needs its object"},
		{res, `{"metadata":{"name":"np"},"spec":{"app":"a","newObject":"yes","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", nil, 400, "newObject"},
		{res, `{"metadata":{"name":"cm"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", nil, 201, `"name":"cm"`},
		{res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"},
			"patchType":"json","patchJson":[{"op":"add","path":"/data/x","value":"$(http://10.1.2.3/v)$"}]}}`, "files", nil, 400, "not supported"},
		{res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"true","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"}}}`,
			"files", nil, 400, "clusterLabel"},
		{res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"},
			"patchType":"json","patchJson":[{"op":"add","path":"/data/x","value":{"app.kubernetes.io/name":"v"}}]}}`,
			"files", map[string]string{"a.txt": "A", "b.txt": "B"}, 201, `"app.kubernetes.io/name":"v"`},
	}
	for _, u := range uploads {
		body, hdr := filesBody(t, u.meta, u.part, u.files)
		code, got, _ := f.send(t, "POST", u.path, body, hdr)
		if code != u.code || !strings.Contains(got, u.bodyHas) {
			t.Fatalf("upload %s: got %d %q, want %d containing %q", u.path, code, got, u.code, u.bodyHas)
		}
	}
	code, got, _ := f.do(t, "GET", res+"/cm/customizations/c1", "")
	var c struct {
		Spec struct {
			PatchJSON []map[string]any `json:"patchJson"`
		}
	}
	if code != 200 || json.Unmarshal([]byte(got), &c) != nil || len(c.Spec.PatchJSON) != 1 {
		t.Fatalf("customization read back: %d %s", code, got)
	}
}

// What EMCO's clients found different (issue 28): clusters by label, GitOps
// clusters refused, unimplemented controllers named, a DIG's history
// starting with Created.
func TestEMCOCompatAnswers(t *testing.T) {
	f := newFixture(t)
	must := func(method, path, body string, want int, has string) {
		t.Helper()
		code, got, _ := f.do(t, method, path, body)
		if code != want || !strings.Contains(got, has) {
			t.Fatalf("%s %s: %d %q, want %d containing %q", method, path, code, got, want, has)
		}
	}
	must("POST", "/v2/cluster-providers", `{"metadata":{"name":"cp"}}`, 201, "cp")
	for _, c := range []string{"c1", "c2", "c3"} {
		body, hdr := filesBody(t, `{"metadata":{"name":"`+c+`"}}`, "file", map[string]string{"kubeconfig": testKubeconfig})
		if code, got, _ := f.send(t, "POST", "/v2/cluster-providers/cp/clusters", body, hdr); code != 201 {
			t.Fatalf("cluster %s: %d %s", c, code, got)
		}
	}
	must("POST", "/v2/cluster-providers/cp/clusters/c1/labels", `{"clusterLabel":"edge"}`, 201, "edge")
	must("POST", "/v2/cluster-providers/cp/clusters/c3/labels", `{"clusterLabel":"edge"}`, 201, "edge")
	must("GET", "/v2/cluster-providers/cp/clusters?label=edge", "", 200, `["c1","c3"]`)
	must("GET", "/v2/cluster-providers/cp/clusters?label=core", "", 200, `[]`)
	must("GET", "/v2/cluster-providers/cp/clusters?withLabels=true", "", 200, `"labels":[{"clusterLabel":"edge"}]`)
	must("GET", "/v2/cluster-providers/nope/clusters?label=edge", "", 404, "not found")
	must("GET", "/v2/cluster-providers/cp/clusters", "", 200, `"name":"c2"`)

	// EMCO's GitOps cluster: metadata with spec.gitOps and a placeholder file.
	body, hdr := filesBody(t, `{"metadata":{"name":"g1"},"spec":{"gitOps":{"gitOpsType":"fluxv2","gitOpsReferenceObject":"git1","gitOpsResourceObject":"git1"}}}`,
		"file", map[string]string{"kubeconfig": "placeholder"})
	if code, got, _ := f.send(t, "POST", "/v2/cluster-providers/cp/clusters", body, hdr); code != 400 || !strings.Contains(got, "GitOps clusters") {
		t.Fatalf("gitOps cluster: %d %s", code, got)
	}
	body, hdr = filesBody(t, `{"metadata":{"name":"g2"},"spec":{"gitOps":{"gitOpsType":"fluxv2"}}}`, "none", nil)
	if code, got, _ := f.send(t, "POST", "/v2/cluster-providers/cp/clusters", body, hdr); code != 400 || !strings.Contains(got, "GitOps clusters") {
		t.Fatalf("gitOps cluster without a file: %d %s", code, got)
	}

	dig := "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/d"
	for path, controller := range map[string]string{
		dig + "/network-controller-intent":                    "ovnaction",
		dig + "/network-controller-intent/n/workload-intents": "ovnaction",
		dig + "/hpa-intents/h":                                "hpa-plc",
		dig + "/traffic-group-intents":                        "dtc",
		dig + "/network-chains":                               "sfc (",
		dig + "/sfc-clients/x":                                "sfc-client",
		dig + "/temporal-workflow-intents/w/start":            "workflow manager",
		dig + "/temporal-action-controller":                   "tac",
		"/v2/projects/p/ca-certs/c/enrollment":                "ca-certs",
		"/v2/cluster-providers/cp/ca-certs":                   "ca-certs",
		"/v2/cluster-providers/cp/cluster-sync-objects/s":     "cluster-sync-objects",
		"/v2/cluster-providers/cp/clusters/c1/stop":           "ncm",
	} {
		for _, method := range []string{"GET", "POST"} {
			must(method, path, "", 501, controller)
		}
	}
	must("GET", "/v2/projects/p/nothing-here", "", 404, "no such resource")

	for _, s := range [][2]string{{"/v2/projects", `{"metadata":{"name":"p"}}`}, {"/v2/projects/p/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups", `{"metadata":{"name":"d"},"spec":{"compositeProfile":"cp","version":"r1"}}`}} {
		must("POST", s[0], s[1], 201, "")
	}
	st, err := f.cat.GetDIGState(context.Background(), catalog.Key{"p", "ca", "v1", "d"})
	if err != nil || st.Current != catalog.StateCreated || len(st.Actions) != 1 || st.Actions[0].State != catalog.StateCreated || st.Actions[0].TimeStamp.IsZero() {
		t.Fatalf("a new DIG's history: %+v %v", st, err)
	}
}
