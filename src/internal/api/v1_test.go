package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime/multipart"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/testenv"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`

// The k8splugin catalogue routes answer with k8splugin's shapes and codes.
func TestV1CatalogueAsK8splugin(t *testing.T) {
	f := newFixture(t)
	chart := testenv.Archive(t, filepath.Join("..", "render", "testdata", "web"))
	steps := []struct {
		method, path, body string
		code               int
		bodyHas            string
	}{
		{"GET", "/v1/healthcheck", "", 200, ""},
		// A definition comes with its profile "default"; the chart names it.
		{"POST", "/v1/rb/definition", `{"rb-name":"rb","rb-version":"v1","description":"d"}`, 201, `"rb-name":"rb"`},
		{"GET", "/v1/rb/definition/rb/v1/profile/default", "", 200, `"namespace":"default"`},
		{"GET", "/v1/rb/definition/rb/v1/profile/default", "", 200, `"release-name":"default"`},
		{"POST", "/v1/rb/definition/rb/v1/content", string(chart), 200, ""},
		{"GET", "/v1/rb/definition/rb/v1", "", 200, `"chart-name":"web"`},
		{"PUT", "/v1/rb/definition/rb/v1", `{"description":"changed","chart-name":"web"}`, 201, `"description":"changed"`},
		{"PUT", "/v1/rb/definition/rb/v1", `{"rb-name":"other"}`, 400, "does not match"},
		{"PUT", "/v1/rb/definition/rb/v9", `{}`, 404, "not found"},
		// Profiles: release name defaults to the profile name; PUT answers 200.
		{"POST", "/v1/rb/definition/rb/v1/profile", `{"profile-name":"p1","namespace":"ns1"}`, 201, `"release-name":"p1"`},
		{"PUT", "/v1/rb/definition/rb/v1/profile/p1", `{"namespace":"ns2","release-name":"r"}`, 200, `"namespace":"ns2"`},
		{"PUT", "/v1/rb/definition/rb/v1/profile/p1", `{"profile-name":"p2"}`, 400, "does not match"},
		{"GET", "/v1/rb/definition/rb/v1/profile", "", 200, `"profile-name":"p1"`},
		// Config templates render the definition's chart until they have content.
		{"POST", "/v1/rb/definition/rb/v1/config-template", `{"template-name":"t1","description":"d"}`, 201, `"has-content":false`},
		{"GET", "/v1/rb/definition/rb/v1/config-template", "", 200, `[{"template-name":"t1","description":"d"}]`},
		{"POST", "/v1/rb/definition/rb/v1/config-template/t1/content", string(chart), 200, ""},
		{"GET", "/v1/rb/definition/rb/v1/config-template/t1", "", 200, `"has-content":true`},
		{"PUT", "/v1/rb/definition/rb/v1/config-template/t1", `{"description":"new"}`, 201, `"description":"new"`},
		// Deleting a definition takes its profiles and templates; deleting
		// what is gone answers 204, as k8splugin's KUD scripts expect.
		{"DELETE", "/v1/rb/definition/rb/v1", "", 204, ""},
		{"GET", "/v1/rb/definition/rb/v1/profile/p1", "", 404, "not found"},
		{"GET", "/v1/rb/definition/rb/v1/profile/default", "", 404, "not found"},
		{"GET", "/v1/rb/definition/rb/v1/config-template/t1", "", 404, "not found"},
		{"DELETE", "/v1/rb/definition/rb/v1/profile/p1", "", 204, ""},
		{"DELETE", "/v1/rb/definition/rb/v1", "", 204, ""},
		{"DELETE", "/v1/rb/definition/rb/v1/config-template/t1", "", 204, ""},
		{"POST", "/v1/rb/definition", `{"rb-name":"rb","rb-version":"v1"}`, 201, ""},
		{"GET", "/v1/rb/definition/rb/v1/profile", "", 200, `[{"rb-name":"rb","rb-version":"v1","profile-name":"default"`},
		{"GET", "/v1/instance", "", 200, "[]"},
	}
	for _, s := range steps {
		code, body, _ := f.do(t, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.bodyHas) {
			t.Fatalf("%s %s: got %d %q, want %d containing %q", s.method, s.path, code, body, s.code, s.bodyHas)
		}
	}
}

func connectivityUpload(t *testing.T, meta string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("metadata", meta)
	fw, _ := mw.CreateFormFile("file", "kubeconfig")
	_, _ = fw.Write([]byte(testKubeconfig))
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

func TestV1ConnectivityAsK8splugin(t *testing.T) {
	f := newFixture(t)
	ct, body := connectivityUpload(t, `{"cloud-region":"kud","cloud-owner":"me",
		"other-connectivity-list":{"connectivity-records":[{"connectivity-record-name":"ovn","FQDN-or-ip":"ovn.example"}]}}`)
	if code, b, _ := f.send(t, "POST", "/v1/connectivity-info", body, map[string]string{"Content-Type": ct}); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	code, got, _ := f.do(t, "GET", "/v1/connectivity-info/kud", "")
	want := []string{`"cloud-region":"kud"`, `"cloud-owner":"me"`, `"FQDN-or-ip":"ovn.example"`,
		`"kubeconfig":"` + base64.StdEncoding.EncodeToString([]byte(testKubeconfig)) + `"`}
	for _, w := range want {
		if code != 200 || !strings.Contains(got, w) {
			t.Fatalf("GET: %d %s, want %s", code, got, w)
		}
	}
	ct, body = connectivityUpload(t, `{"cloud-region":"kud2"}`)
	if code, b, _ := f.send(t, "POST", "/v1/connectivity-info", body, map[string]string{"Content-Type": ct}); code != 400 || !strings.Contains(b, "cloud-owner") {
		t.Fatalf("without cloud-owner: %d %s", code, b)
	}
	for i := 0; i < 2; i++ { // the second time it is gone already
		if code, b, _ := f.do(t, "DELETE", "/v1/connectivity-info/kud", ""); code != 204 {
			t.Fatalf("delete %d: %d %s", i, code, b)
		}
	}
}

// A config rollback names its target at the top level, as k8splugin's
// handler decodes it and CDS sends it, or wrapped in anyOf.
func TestRollbackBodyShapes(t *testing.T) {
	for body, want := range map[string][2]string{
		`{"config-version":"2"}`:                 {"2", ""},
		`{"config-version":3}`:                   {"3", ""},
		`{"config-tag":"good"}`:                  {"", "good"},
		`{"anyOf":{"config-version":"4"}}`:       {"4", ""},
		`{"anyOf":{"config-tag":"t"}}`:           {"", "t"},
		`{"config-tag":"top","anyOf":{}}`:        {"", "top"},
		`{"config-version":"1","anyOf":null}`:    {"1", ""},
		`{"anyOf":{"config-tag":"in"},"x":true}`: {"", "in"},
	} {
		var b rollbackBody
		if err := json.Unmarshal([]byte(body), &b); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		tgt := b.target()
		v, err := tgt.version()
		if err != nil || v != want[0] || tgt.ConfigTag != want[1] {
			t.Errorf("%s: version %q tag %q (%v), want %q %q", body, v, tgt.ConfigTag, err, want[0], want[1])
		}
	}
}
