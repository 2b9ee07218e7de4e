package api

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// A sync's filters come from the query string and the body together; a
// body may give each as a string or a list, or be empty or emcoctl's
// {"metadata":{}}.
func TestSyncFilter(t *testing.T) {
	s := bareServer(t, Options{MaxJSONBody: 1 << 10, MaxJSONDepth: 8})
	cases := map[string]struct {
		query, body string
		want        string
	}{
		"nothing":         {"", "", "app=[] cluster=[] resource=[]"},
		"emcoctl's body":  {"", `{"metadata":{}}`, "app=[] cluster=[] resource=[]"},
		"query":           {"?app=sink&cluster=cp%2Bedge01&resource=ConfigMap/cm", "", "app=[sink] cluster=[cp+edge01] resource=[ConfigMap/cm]"},
		"body strings":    {"", `{"app":"sink","resource":"cm"}`, "app=[sink] cluster=[] resource=[cm]"},
		"body lists":      {"", `{"cluster":["cp+a","cp+b"]}`, "app=[] cluster=[cp+a cp+b] resource=[]"},
		"query with body": {"?app=a", `{"app":["b"]}`, "app=[a b] cluster=[] resource=[]"},
	}
	for name, c := range cases {
		req := httptest.NewRequest("POST", "/sync"+c.query, strings.NewReader(c.body))
		f, err := s.syncFilter(httptest.NewRecorder(), req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := "app=" + fmtList(f["app"]) + " cluster=" + fmtList(f["cluster"]) + " resource=" + fmtList(f["resource"])
		if got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	for _, bad := range []string{`{"app":1}`, `[`} {
		_, err := s.syncFilter(httptest.NewRecorder(), httptest.NewRequest("POST", "/sync", strings.NewReader(bad)))
		if !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrUnprocessable) {
			t.Errorf("%s: %v, want a 4xx kind", bad, err)
		}
	}
}

func fmtList(l []string) string { return "[" + strings.Join(l, " ") + "]" }
