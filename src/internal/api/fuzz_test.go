package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// FuzzHandler drives the complete handler — router, middleware, decoding,
// the real catalogue on FerretDB — with arbitrary methods, paths, queries and
// bodies. Whatever arrives, the answer is never a 5xx and nothing panics.
func FuzzHandler(f *testing.F) {
	seeds := []struct{ method, path, query, body string }{
		{"POST", "/v2/projects", "", `{"metadata":{"name":"p1"}}`},
		{"GET", "/v2/projects/p1", "", ""},
		{"PUT", "/v2/projects/p1", "a=b", `{"metadata":{"name":"p1","description":"x"}}`},
		{"DELETE", "/v2/projects/p1", "", ""},
		{"POST", "/v2/projects", "", `{"metadata":`},
		{"POST", "/v2/projects", "", `{"metadata":{"name":"\u0000"}}`},
		{"PATCH", "/v2/projects", "", "{}"},
		{"GET", "/readyz", "", ""},
		{"GET", "/v2/../v2/projects", "", ""},
		{"BREW", "/v2/projects/%2F", "x=%zz", "\xff"},
		{"POST", "/v1/rb/definition", "", `{"rb-name":"rb","rb-version":"v1","labels":{"a.b":"c"}}`},
		{"PUT", "/v1/rb/definition/rb/v1", "", `{"rb-name":"rb","description":"d"}`},
		{"POST", "/v1/rb/definition/rb/v1/profile", "", `{"profile-name":"p","extra-resource-types":[{"Kind":"X"}]}`},
		{"PUT", "/v1/rb/definition/rb/v1/profile/p", "", `{"release-name":"r"}`},
		{"POST", "/v1/rb/definition/rb/v1/config-template", "", `{"template-name":"t"}`},
		{"POST", "/v1/rb/definition/rb/v1/config-template/t/content", "", "\x1f\x8b"},
		{"DELETE", "/v1/rb/definition/rb/v1", "", ""},
		{"GET", "/v1/healthcheck", "", ""},
		{"GET", "/v1/instance", "rb-name=rb", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cat, _, err := catalog.Open(ctx, catalog.Options{DB: env.Database(f)})
	cancel()
	if err != nil {
		f.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h, err := New(Options{Catalog: cat, Registerer: reg, Gatherer: reg})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		if !validMethod(method) {
			return // net/http never hands such a request to a handler
		}
		u := &url.URL{Scheme: "http", Host: "argus", Path: path, RawQuery: query}
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "\x00") {
			return
		}
		req, err := http.NewRequest(method, u.String(), bytes.NewReader(body))
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s with %q: %d %s", method, path, query, body, rec.Code, rec.Body.String())
		}
	})
}

// validMethod accepts HTTP tokens, as net/http's server does.
func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, c) {
			return false
		}
	}
	return true
}

// FuzzRollbackBody: a config rollback's version, as a string or a number,
// whatever arrives; never a panic, and a number comes back as itself.
func FuzzRollbackBody(f *testing.F) {
	for _, s := range []string{`{"anyOf":{"config-version":"2"}}`, `{"anyOf":{"config-version":3}}`, `{"anyOf":{"config-tag":"t"}}`,
		`{"anyOf":{"config-version":-1}}`, `{"anyOf":{"config-version":1e99}}`, `{"anyOf":{"config-version":null}}`,
		`{"config-version":"2"}`, `{"config-tag":"good"}`, `{"config-version":4,"anyOf":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b rollbackBody
		if json.Unmarshal(data, &b) != nil {
			return
		}
		tgt := b.target()
		v, err := tgt.version()
		if err == nil && v != "" && strings.TrimSpace(string(tgt.ConfigVersion)) == v {
			if _, perr := strconv.ParseUint(v, 10, 64); perr != nil {
				t.Fatalf("number %s came back as %q", tgt.ConfigVersion, v)
			}
		}
	})
}
