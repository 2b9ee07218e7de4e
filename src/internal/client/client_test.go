package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A server that redirects elsewhere (another port of its host, which Go's
// client would hand the Authorization header to) gets no token sent
// there: the client refuses the redirect. A redirect within the server's
// origin (mux's cleaned paths) is still followed.
func TestTokenNeverFollowsARedirectElsewhere(t *testing.T) {
	var leaked atomic.Value
	leaked.Store("")
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{}`))
	}))
	defer other.Close()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/overview":
			http.Redirect(w, r, other.URL+"/v2/overview", http.StatusFound)
		case "//v2/overview/clusters":
			http.Redirect(w, r, "/v2/overview/clusters", http.StatusMovedPermanently)
		default:
			if r.Header.Get("Authorization") != "Bearer secret" {
				w.WriteHeader(http.StatusUnauthorized)
			}
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := New(Options{Server: api.URL, Token: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Overview(ctx); err == nil || !strings.Contains(err.Error(), "refusing a redirect") {
		t.Errorf("a redirect to another port: %v, want it refused", err)
	}
	if got := leaked.Load().(string); got != "" {
		t.Fatalf("the token went to another server: %q", got)
	}
	if _, err := c.do(ctx, http.MethodGet, "//v2/overview/clusters", nil, nil); err != nil {
		t.Errorf("a redirect within the server: %v", err)
	}
}
