package api

import (
	"archive/tar"
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// upload posts an EMCO multipart upload.
func (f *fixture) upload(t *testing.T, path, meta string, file []byte) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("metadata", meta)
	fw, _ := mw.CreateFormFile("file", "f.tgz")
	_, _ = fw.Write(file)
	_ = mw.Close()
	return f.post(t, path, mw.FormDataContentType(), buf.Bytes())
}

const chartYAML = "apiVersion: v2\nname: web\nversion: 0.1.0\n"

// Every archive an upload carries (v2 app chart and profile, v1 content)
// is inspected and loaded: layouts Helm and EMCO users pack are accepted,
// hostile and broken ones refused with 400/413, never 500.
func TestUploadedArchives(t *testing.T) {
	f := newFixture(t)
	for _, s := range []struct{ path, body string }{
		{"/v2/projects", `{"metadata":{"name":"p1"}}`},
		{"/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p1/composite-apps/ca/v1/composite-profiles", `{"metadata":{"name":"cpf"}}`},
		{"/v1/rb/definition", `{"rb-name":"rb","rb-version":"v1"}`},
		{"/v1/rb/definition/rb/v1/profile", `{"profile-name":"pr"}`},
	} {
		if code, body, _ := f.do(t, "POST", s.path, s.body); code != 201 {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
	}
	manifest := "version: v1\ntype:\n  values: v.yaml\n"
	var tiny bytes.Buffer
	if err := tgz.TinyFiles(&tiny, 6000); err != nil {
		t.Fatal(err)
	}
	charts := map[string]struct {
		data []byte
		code int
		want string
	}{
		"helm package":          {testenv.ArchiveFiles(t, map[string]string{"web/Chart.yaml": chartYAML}), 201, ""},
		"packed from inside":    {tgz.FromInside(t, map[string]string{"Chart.yaml": chartYAML}), 201, ""},
		"files at the root":     {testenv.ArchiveFiles(t, map[string]string{"Chart.yaml": chartYAML}), 201, ""},
		"link":                  {tgz.Entries(t, tgz.Entry{Name: "web/Chart.yaml", Type: tar.TypeSymlink, Link: "/etc/passwd"}), 400, "link"},
		"parent directory":      {testenv.ArchiveFiles(t, map[string]string{"../Chart.yaml": chartYAML}), 400, "parent"},
		"too many files":        {tiny.Bytes(), 413, "more than 5000 entries"},
		"no chart":              {testenv.ArchiveFiles(t, map[string]string{"x/README": "hi"}), 400, "Chart.yaml"},
		"invalid Chart.yaml":    {testenv.ArchiveFiles(t, map[string]string{"web/Chart.yaml": "name: [\n"}), 400, "Chart.yaml"},
		"not an archive at all": {[]byte("hello"), 400, "gzip"},
	}
	i := 0
	for name, c := range charts {
		t.Run("chart "+name, func(t *testing.T) {
			i++
			app := strings.Repeat("a", i)
			code, body := f.upload(t, "/v2/projects/p1/composite-apps/ca/v1/apps", `{"metadata":{"name":"`+app+`"}}`, c.data)
			if code != c.code || !strings.Contains(body, c.want) {
				t.Fatalf("app: %d %s, want %d %q", code, body, c.code, c.want)
			}
			code, body = f.post(t, "/v1/rb/definition/rb/v1/content", "application/octet-stream", c.data)
			if code != v1Code(c.code) || !strings.Contains(body, c.want) {
				t.Fatalf("v1 content: %d %s, want %d %q", code, body, c.code, c.want)
			}
		})
	}
	profiles := map[string]struct {
		data []byte
		code int
	}{
		"packed from inside": {tgz.FromInside(t, map[string]string{"manifest.yaml": manifest, "v.yaml": "a: 1\n"}), 201},
		"in a folder":        {testenv.ArchiveFiles(t, map[string]string{"p/manifest.yaml": manifest, "p/v.yaml": "a: 1\n"}), 201},
		"no manifest":        {testenv.ArchiveFiles(t, map[string]string{"v.yaml": "a: 1\n"}), 400},
		"too many files":     {tiny.Bytes(), 413},
	}
	for name, c := range profiles {
		t.Run("profile "+name, func(t *testing.T) {
			i++
			code, body := f.upload(t, "/v2/projects/p1/composite-apps/ca/v1/composite-profiles/cpf/profiles",
				`{"metadata":{"name":"`+strings.Repeat("p", i)+`"},"spec":{"app":"web"}}`, c.data)
			if code != c.code {
				t.Fatalf("v2 profile: %d %s, want %d", code, body, c.code)
			}
			if code, body := f.post(t, "/v1/rb/definition/rb/v1/profile/pr/content", "application/octet-stream", c.data); code != v1Code(c.code) {
				t.Fatalf("v1 profile content: %d %s, want %d", code, body, c.code)
			}
		})
	}
}

// v1Code is k8splugin's answer to a content upload where v2 answers code.
func v1Code(code int) int {
	if code == http.StatusCreated {
		return http.StatusOK
	}
	return code
}

// Keys Helm's --set uses, and label keys, are accepted and read back as
// sent (they used to answer 500).
func TestDottedKeysRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`)
	f.do(t, "POST", "/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`)
	values := `{"$x":"1","image.repository":"registry.example/web","service.port":"8080"}`
	dig := `{"metadata":{"name":"d"},"spec":{"compositeProfile":"cpf","overrideValues":[{"app":"web","values":` + values + `}]}}`
	if code, body, _ := f.do(t, "POST", "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups", dig); code != 201 || !strings.Contains(body, values) {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body, _ := f.do(t, "GET", "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups/d", ""); code != 200 || !strings.Contains(body, values) {
		t.Fatalf("get: %d %s", code, body)
	}
	labels := `{"app.kubernetes.io/name":"web"}`
	if code, body, _ := f.do(t, "POST", "/v1/rb/definition", `{"rb-name":"rb","rb-version":"v1","labels":`+labels+`}`); code != 201 {
		t.Fatalf("definition: %d %s", code, body)
	}
	if code, body, _ := f.do(t, "GET", "/v1/rb/definition/rb/v1", ""); code != 200 || !strings.Contains(body, labels) {
		t.Fatalf("get definition: %d %s", code, body)
	}
}

// A DIG is deleted only when nothing of it is deployed, and no action can
// start while it goes; a delete refused for its children leaves its
// lifecycle as it was.
func TestDIGDeleteLocksItsLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat := f.cat
	base := "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups"
	for _, s := range []struct{ path, body string }{
		{"/v2/projects", `{"metadata":{"name":"p1"}}`},
		{"/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{base, `{"metadata":{"name":"d"},"spec":{"compositeProfile":"cpf"}}`},
		{base + "/d/generic-placement-intents", `{"metadata":{"name":"gpi"}}`},
	} {
		if code, body, _ := f.do(t, "POST", s.path, s.body); code != 201 {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
	}
	dig := catalog.Key{"p1", "ca", "v1", "d"}
	if _, err := cat.TransitionDIG(ctx, dig, []string{catalog.StateCreated}, catalog.StateAction{State: catalog.StateApproved}, ""); err != nil {
		t.Fatal(err)
	}
	// Refused for its child: the lifecycle stays Approved.
	if code, body, _ := f.do(t, "DELETE", base+"/d", ""); code != http.StatusConflict || !strings.Contains(body, "generic placement intents") {
		t.Fatalf("delete with children: %d %s", code, body)
	}
	if st, err := cat.GetDIGState(ctx, dig); err != nil || st.Current != catalog.StateApproved {
		t.Fatalf("after a refused delete the lifecycle is %+v, %v", st, err)
	}
	f.do(t, "DELETE", base+"/d/generic-placement-intents/gpi", "")
	if _, err := cat.TransitionDIG(ctx, dig, []string{catalog.StateApproved}, catalog.StateAction{State: catalog.StateInstantiated, ContextID: "1"}, "1"); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := f.do(t, "DELETE", base+"/d", ""); code != http.StatusConflict || !strings.Contains(body, "Instantiated; it can be deleted when it is") {
		t.Fatalf("delete an instantiated DIG: %d %s", code, body)
	}
	if _, err := cat.TransitionDIG(ctx, dig, []string{catalog.StateInstantiated}, catalog.StateAction{State: catalog.StateTerminated, ContextID: "1"}, ""); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := f.do(t, "DELETE", base+"/d", ""); code != http.StatusNoContent {
		t.Fatalf("delete a terminated DIG: %d %s", code, body)
	}
	if st, err := cat.GetDIGState(ctx, dig); err != nil || st.Current != catalog.StateCreated || len(st.Actions) != 0 {
		t.Fatalf("the lifecycle outlived its DIG: %+v, %v", st, err)
	}
}
