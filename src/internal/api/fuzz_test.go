package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cat, err := catalog.New(ctx, env.Database(f), catalog.AllKinds()...)
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
