package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

type fixture struct {
	srv    *httptest.Server
	reg    *prometheus.Registry
	checks map[string]Check
	cat    *catalog.Catalog
}

func newFixture(t testing.TB) *fixture { t.Helper(); return newFixtureWith(t, nil) }

// newFixtureWith lets a test adjust the Options before the server is built.
func newFixtureWith(t testing.TB, adjust func(*Options)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, _, err := catalog.Open(ctx, catalog.Options{DB: env.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{reg: prometheus.NewRegistry(), checks: map[string]Check{
		"etcd":  env.Etcd.Ping,
		"mongo": env.Mongo.Ping,
	}}
	opts := Options{Catalog: cat, Checks: f.checks, Registerer: f.reg, Gatherer: f.reg}
	if adjust != nil {
		adjust(&opts)
	}
	f.cat = opts.Catalog
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) do(t testing.TB, method, path, body string) (int, string, http.Header) {
	t.Helper()
	return f.send(t, method, path, strings.NewReader(body), nil)
}

// send makes one request with the given headers and reads the whole answer.
func (f *fixture) send(t testing.TB, method, path string, body io.Reader, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestProjectsLifecycle(t *testing.T) {
	f := newFixture(t)
	steps := []struct {
		method, path, body string
		code               int
		bodyHas            string
	}{
		{"GET", "/v2/projects", "", 200, "[]"},
		{"POST", "/v2/projects", `{"metadata":{"name":"p1","description":"first","userData1":"u1"}}`, 201, `"description":"first"`},
		{"GET", "/v2/projects/p1", "", 200, `"userData1":"u1"`},
		{"POST", "/v2/projects", `{"metadata":{"name":"p1"}}`, 409, `project "p1" already exists`},
		{"PUT", "/v2/projects/p1", `{"metadata":{"name":"p1","description":"second"}}`, 200, `"description":"second"`},
		{"PUT", "/v2/projects/p2", `{"metadata":{}}`, 201, `"name":"p2"`}, // URL name fills an empty body name
		{"PUT", "/v2/projects/p2", `{"metadata":{"name":"p3"}}`, 400, "does not match"},
		{"GET", "/v2/projects", "", 200, `"name":"p2"`},
		{"DELETE", "/v2/projects/p1", "", 204, ""},
		{"GET", "/v2/projects/p1", "", 404, `project "p1" not found`},
		{"DELETE", "/v2/projects/p1", "", 404, "not found"},
	}
	for _, s := range steps {
		code, body, _ := f.do(t, s.method, s.path, s.body)
		if code != s.code || !strings.Contains(body, s.bodyHas) {
			t.Fatalf("%s %s: got %d %q, want %d containing %q", s.method, s.path, code, body, s.code, s.bodyHas)
		}
	}
}

func TestBadInputNeverYields500(t *testing.T) {
	f := newFixture(t)
	f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"dup"}}`)
	big := `{"metadata":{"name":"big","description":"` + strings.Repeat("x", DefaultMaxJSONBody) + `"}}`
	cases := map[string]struct {
		method, path, body string
		code               int
	}{
		"undecodable":        {"POST", "/v2/projects", `{"metadata":`, 422},
		"not an object":      {"POST", "/v2/projects", `"p1"`, 422},
		"empty body":         {"POST", "/v2/projects", ``, 422},
		"trailing data":      {"POST", "/v2/projects", `{"metadata":{"name":"a"}} {}`, 422},
		"wrong field type":   {"POST", "/v2/projects", `{"metadata":{"name":5}}`, 422},
		"missing name":       {"POST", "/v2/projects", `{"metadata":{}}`, 400},
		"invalid name":       {"POST", "/v2/projects", `{"metadata":{"name":"a/b"}}`, 400},
		"name too long":      {"POST", "/v2/projects", `{"metadata":{"name":"` + strings.Repeat("a", 129) + `"}}`, 400},
		"invalid name (PUT)": {"PUT", "/v2/projects/-x", `{"metadata":{}}`, 400},
		"over the limit":     {"POST", "/v2/projects", big, 413},
		"duplicate":          {"POST", "/v2/projects", `{"metadata":{"name":"dup"}}`, 409},
		"unknown object":     {"GET", "/v2/projects/nope", ``, 404},
		"unknown path":       {"GET", "/v2/nothing-here", ``, 404},
		"wrong method":       {"PATCH", "/v2/projects/dup", ``, 405},
		"wrong method (col)": {"DELETE", "/v2/projects", ``, 405},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body, _ := f.do(t, tc.method, tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("got %d %q, want %d", code, body, tc.code)
			}
		})
	}
}

func TestMethodNotAllowedListsAllowed(t *testing.T) {
	f := newFixture(t)
	_, _, h := f.do(t, "PATCH", "/v2/projects/x", "")
	if got := h.Get("Allow"); got != "GET, PUT, DELETE" {
		t.Fatalf("Allow = %q", got)
	}
}

func TestAnyContentTypeIsAccepted(t *testing.T) {
	f := newFixture(t)
	for i, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-8"} {
		name := []string{"a", "b", "c", "d"}[i]
		req, _ := http.NewRequest("POST", f.srv.URL+"/v2/projects", strings.NewReader(`{"metadata":{"name":"`+name+`"}}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("Content-Type %q: got %d", ct, resp.StatusCode)
		}
	}
}

func TestHealthReadinessMetrics(t *testing.T) {
	f := newFixture(t)
	if code, _, _ := f.do(t, "GET", "/healthz", ""); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	if code, body, _ := f.do(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d %s", code, body)
	}
	f.checks["etcd"] = func(context.Context) error { return errors.New("down") }
	if code, body, _ := f.do(t, "GET", "/readyz", ""); code != 503 || !strings.Contains(body, "etcd") {
		t.Fatalf("readyz with a failing store = %d %q", code, body)
	}
	f.do(t, "GET", "/v2/projects/nope", "")
	_, metrics, _ := f.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`argus_http_requests_total{code="404",method="GET",route="/v2/projects/{project}"} 1`,
		`argus_http_request_duration_seconds_count{method="GET",route="/v2/projects/{project}"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestRequestID(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequest("GET", f.srv.URL+"/healthz", nil)
	req.Header.Set(RequestIDHeader, "client-id-1")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(RequestIDHeader); got != "client-id-1" {
		t.Fatalf("echoed id = %q", got)
	}
	req.Header.Set(RequestIDHeader, "bad id\twith junk")
	resp, err = f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(RequestIDHeader); got == "" || strings.Contains(got, " ") {
		t.Fatalf("a junk id must be replaced, got %q", got)
	}
}

func TestPanicBecomes500(t *testing.T) {
	s := &server{opts: Options{}}
	s.opts.Logger = loggerFrom(context.Background()).WithField("test", true)
	s.opts.Logger.Logger.SetOutput(io.Discard)
	h := s.recovery(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 {
		t.Fatalf("code = %d", rec.Code)
	}
}
