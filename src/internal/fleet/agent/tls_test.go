package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// nopCluster is a Cluster that does nothing: the join test needs none.
type nopCluster struct{}

func (nopCluster) Run(ctx context.Context, _ Reporter) error { <-ctx.Done(); return nil }
func (nopCluster) Apply(Work)                                {}
func (nopCluster) Forget(WorkKey)                            {}
func (nopCluster) Monitor() (string, string)                 { return running() }

// memCredentials keeps the credential in memory.
type memCredentials struct{ c *Credential }

func (m *memCredentials) Load(context.Context) (*Credential, error) { return m.c, nil }
func (m *memCredentials) Save(_ context.Context, c Credential) error {
	m.c = &c
	return nil
}

// The join over https is verified against --orchestrator-ca's roots: with
// them it succeeds at whichever URL answers (each URL's own host is
// verified), with the system's roots the orchestrator's certificate is
// refused and nothing is sent.
func TestJoinOverTLSIsVerified(t *testing.T) {
	var joins int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/fleet/join" {
			http.NotFound(w, r)
			return
		}
		joins++
		_, _ = w.Write([]byte(`{"clusterProvider":"cp","cluster":"edge","credential":"c"}`))
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	// The server's certificate names 127.0.0.1, ::1 and *.example.com; the
	// agent's first URL (another replica, never dialed here) a name it
	// does not hold, the second the server by 127.0.0.1.
	second := srv.URL
	first := "https://argus.invalid:9015"

	a, err := New(Options{Orchestrators: []string{first, second}, RootCAs: roots, Cluster: nopCluster{}, Credentials: &memCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.http.CloseIdleConnections()
	c, err := join(t.Context(), a.http, a.endpoints[1], "tok", "")
	if err != nil || c.Credential != "c" || c.Cluster.Name != "edge" {
		t.Fatalf("join with the orchestrator's CA: %+v %v", c, err)
	}

	untrusting, err := New(Options{Orchestrators: []string{second}, Cluster: nopCluster{}, Credentials: &memCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.http.CloseIdleConnections()
	before := joins
	_, err = join(t.Context(), untrusting.http, untrusting.endpoints[0], "tok", "")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || errors.Is(err, ErrRefused) || joins != before {
		t.Fatalf("join without the orchestrator's CA: %v (joins %d→%d), want an unknown authority", err, before, joins)
	}
}

// A join answered with a redirect is not followed: a 307 would carry the
// join token, in the body, to wherever it points.
func TestJoinIsNeverRedirected(t *testing.T) {
	var got atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v2/fleet/join", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	a, err := New(Options{Orchestrators: []string{srv.URL}, Cluster: nopCluster{}, Credentials: &memCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.http.CloseIdleConnections()
	if _, err := join(t.Context(), a.http, a.endpoints[0], "tok", ""); err == nil || got.Load() != 0 {
		t.Fatalf("a redirected join: %v, %d requests elsewhere; want an error and none", err, got.Load())
	}
}
