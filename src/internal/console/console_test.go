package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesOnlyItsFiles(t *testing.T) {
	h := Handler()
	cases := map[string]struct {
		code  int
		ctype string
	}{
		"/":                      {200, "text/html"},
		"/console/app.js":        {200, "javascript"},
		"/console/app.css":       {200, "text/css"},
		"/console/index.html":    {404, ""},
		"/console/":              {404, ""},
		"/console/../console.go": {404, ""},
		"/console/static/app.js": {404, ""},
		"/console/missing.js":    {404, ""},
		"/elsewhere":             {404, ""},
	}
	for path, want := range cases {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.Path = path // as the router hands it over, unclean paths included
		h.ServeHTTP(rec, req)
		if rec.Code != want.code || !strings.Contains(rec.Header().Get("Content-Type"), want.ctype) {
			t.Errorf("%s: %d %q, want %d %q", path, rec.Code, rec.Header().Get("Content-Type"), want.code, want.ctype)
		}
		if rec.Code == 200 && (rec.Header().Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'self'")) {
			t.Errorf("%s: headers %v", path, rec.Header())
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
	if rec.Code != 200 || rec.Body.Len() != 0 {
		t.Errorf("HEAD /: %d with %d bytes", rec.Code, rec.Body.Len())
	}
}

// The page loads nothing from elsewhere: it must work air-gapped.
func TestNothingFromElsewhere(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		data, err := static.ReadFile("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "//cdn", "innerHTML", "EventSource("} {
			if strings.Contains(string(data), bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}
