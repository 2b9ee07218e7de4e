package api

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/authn"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

var _ TokenChecker = (*authn.TokenFile)(nil)

// authFixture serves the API with the tokens in a file the test can rewrite.
func authFixture(t *testing.T, tokens string) (*fixture, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	testcert.WriteFile(t, path, []byte(tokens))
	tf, err := authn.NewTokenFile(authn.Options{Path: path, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, func(o *Options) { o.Tokens = tf }), path
}

func (f *fixture) doAuth(t testing.TB, method, path, authorization string) (int, string, http.Header) {
	t.Helper()
	header := map[string]string{}
	if authorization != "" {
		header["Authorization"] = authorization
	}
	return f.send(t, method, path, nil, header)
}

func TestBearerTokens(t *testing.T) {
	f, _ := authFixture(t, "# current and next\ntoken-one\ntoken-two\n")
	cases := map[string]struct {
		method, path, authorization string
		code                        int
		challenge                   string
	}{
		"no token":                 {"GET", "/v2/projects", "", 401, `Bearer realm="argus"`},
		"wrong token":              {"GET", "/v2/projects", "Bearer token-three", 401, `Bearer realm="argus", error="invalid_token"`},
		"token prefix":             {"GET", "/v2/projects", "Bearer token-on", 401, `Bearer realm="argus", error="invalid_token"`},
		"other scheme":             {"GET", "/v2/projects", "Basic dG9rZW4tb25lOg==", 401, `Bearer realm="argus"`},
		"scheme without token":     {"GET", "/v2/projects", "Bearer ", 401, `Bearer realm="argus"`},
		"right token":              {"GET", "/v2/projects", "Bearer token-one", 200, ""},
		"second token":             {"GET", "/v2/projects", "Bearer token-two", 200, ""},
		"scheme is case-blind":     {"GET", "/v2/projects", "bearer token-one", 200, ""},
		"v1 route":                 {"GET", "/v1/rb/definition", "", 401, `Bearer realm="argus"`},
		"v1 route with token":      {"GET", "/v1/rb/definition", "Bearer token-one", 200, ""},
		"metrics need a token":     {"GET", "/metrics", "", 401, `Bearer realm="argus"`},
		"metrics with token":       {"GET", "/metrics", "Bearer token-two", 200, ""},
		"liveness probe is open":   {"GET", "/healthz", "", 200, ""},
		"readiness probe is open":  {"GET", "/readyz", "", 200, ""},
		"HEAD probe is open":       {"HEAD", "/healthz", "", 200, ""},
		"probe with a bad token":   {"GET", "/healthz", "Bearer nope", 200, ""},
		"unknown path stays quiet": {"GET", "/v2/nothing-here", "", 401, `Bearer realm="argus"`},
		"unknown path with token":  {"GET", "/v2/nothing-here", "Bearer token-one", 404, ""},
		"wrong method stays quiet": {"PATCH", "/v2/projects", "", 401, `Bearer realm="argus"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body, h := f.doAuth(t, tc.method, tc.path, tc.authorization)
			if code != tc.code {
				t.Fatalf("got %d %q, want %d", code, body, tc.code)
			}
			if got := h.Get("WWW-Authenticate"); got != tc.challenge {
				t.Fatalf("WWW-Authenticate = %q, want %q", got, tc.challenge)
			}
			if code == 401 && tc.method != "HEAD" && !strings.Contains(body, "token") {
				t.Fatalf("401 body does not say why: %q", body)
			}
			if strings.Contains(body, "token-one") || strings.Contains(body, "token-two") {
				t.Fatalf("a token leaked into the body: %q", body)
			}
		})
	}
	// Refused requests are counted under the route they were for.
	_, metrics, _ := f.doAuth(t, "GET", "/metrics", "Bearer token-one")
	if want := `argus_http_requests_total{code="401",method="GET",route="/v2/projects"}`; !strings.Contains(metrics, want) {
		t.Fatalf("metrics lack %s", want)
	}
}

func TestTokenRotationNeedsNoRestart(t *testing.T) {
	f, path := authFixture(t, "old-token\n")
	if code, _, _ := f.doAuth(t, "GET", "/v2/projects", "Bearer old-token"); code != 200 {
		t.Fatalf("old token before rotation: %d", code)
	}
	testcert.WriteFile(t, path, []byte("new-token\n"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		oldCode, _, _ := f.doAuth(t, "GET", "/v2/projects", "Bearer old-token")
		newCode, _, _ := f.doAuth(t, "GET", "/v2/projects", "Bearer new-token")
		if oldCode == 401 && newCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotation not in force after 10s: old token %d, new token %d", oldCode, newCode)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc", "  Bearer abc": "abc",
		"": "", "Bearer": "", "Bearer ": "", "Basic abc": "", "Bearerabc": "",
	} {
		got, ok := bearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("bearerToken(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
}

// A read-only token reads everything and writes nothing (403); GET
// /v2/access tells a client which kind of token it holds.
func TestReadOnlyTokens(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"write": "writer\n", "read": "reader\n"}
	checkers := map[string]*authn.TokenFile{}
	for name, content := range files {
		path := filepath.Join(dir, name)
		testcert.WriteFile(t, path, []byte(content))
		tf, err := authn.NewTokenFile(authn.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		checkers[name] = tf
	}
	f := newFixtureWith(t, func(o *Options) {
		o.Tokens, o.ReadTokens = checkers["write"], checkers["read"]
		o.Clouds = kubeconfigClouds{}
	})
	cases := []struct {
		method, path, token string
		code                int
		body                string
	}{
		{"GET", "/v2/projects", "reader", 200, ""},
		{"HEAD", "/v2/projects", "reader", 405, ""}, // past authentication: the route serves GET only
		{"GET", "/v2/access", "reader", 200, `"write":false`},
		{"GET", "/v2/access", "writer", 200, `"write":true`},
		{"POST", "/v2/projects", "reader", 403, "may only read"},
		{"DELETE", "/v2/projects/p", "reader", 403, "may only read"},
		{"POST", "/v2/projects", "nobody", 401, ""},
		// A cloud's kubeconfig is a credential that writes to its clusters.
		{"GET", kubeconfigPath, "reader", 403, "needs a token of --auth-token-file"},
		{"GET", kubeconfigPath, "writer", 200, "client-key-data"},
		// So is a v1 cloud region's, which holds the cluster's kubeconfig.
		{"GET", "/v1/connectivity-info/region1", "reader", 403, "needs a token of --auth-token-file"},
		{"GET", "/v1/connectivity-info/region1", "writer", 404, ""},
		{"GET", "/v1/connectivity-info", "reader", 200, ""},
		{"GET", "/v2/access", "", 401, ""},
	}
	for _, c := range cases {
		auth := ""
		if c.token != "" {
			auth = "Bearer " + c.token
		}
		code, body, _ := f.doAuth(t, c.method, c.path, auth)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s %s with %q: %d %q, want %d %q", c.method, c.path, c.token, code, body, c.code, c.body)
		}
	}
	open := newFixtureWith(t, func(*Options) {})
	if code, body, _ := open.doAuth(t, "GET", "/v2/access", ""); code != 200 || strings.TrimSpace(body) != `{"auth":"none","write":true}` {
		t.Errorf("open API: %d %s", code, body)
	}
}

const kubeconfigPath = "/v2/projects/p/logical-clouds/lc/cluster-references/r/kubeconfig"

// kubeconfigClouds serves a logical cloud's kubeconfig; nothing else.
type kubeconfigClouds struct{ Clouds }

func (kubeconfigClouds) Kubeconfig(context.Context, string, string, string) ([]byte, error) {
	return []byte("users:\n- user:\n    client-key-data: c2VjcmV0\n"), nil
}
