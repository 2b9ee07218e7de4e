package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/argus-mc/argus/src/internal/appcontext"
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

// Every join attempt names the credential the agent chose and kept
// (pending) before the first, after a restart too: an attempt whose answer
// was lost spent the token, and only the same credential gets it again.
func TestJoinAttemptsNameOneKeptCredential(t *testing.T) {
	var named []string
	var lost atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Token, Credential string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		named = append(named, body.Credential)
		if !lost.Swap(true) { // the first answer never arrives
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"clusterProvider": "cp", "cluster": "edge", "credential": body.Credential})
	}))
	defer srv.Close()
	creds := &memCredentials{}
	newAgent := func() *Agent {
		a, err := New(Options{Orchestrators: []string{srv.URL}, JoinToken: "id.secret", Cluster: nopCluster{}, Credentials: creds,
			BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.http.CloseIdleConnections)
		return a
	}
	// A first process: its attempt is cut, and it stops before the next.
	first := newAgent()
	chosen, err := first.choose(t.Context(), nil)
	if err != nil || len(chosen) < 43 {
		t.Fatalf("chosen %q: %v", chosen, err)
	}
	if _, err := join(t.Context(), first.http, first.endpoints[0], "id.secret", chosen); err == nil {
		t.Fatal("the cut attempt succeeded")
	}
	// A restarted process names the same credential and keeps the answer.
	c, _, err := newAgent().credential(t.Context())
	if err != nil || c.Credential != chosen || c.Cluster.Name != "edge" {
		t.Fatalf("join after a restart: %+v %v", c, err)
	}
	if len(named) != 2 || named[0] != chosen || named[1] != chosen {
		t.Fatalf("attempts named %q, want %q twice", named, chosen)
	}
	kept, _ := creds.Load(t.Context())
	if kept == nil || kept.pending() || kept.Credential != chosen {
		t.Fatalf("kept %+v", kept)
	}
	// A re-join (the kept credential refused) chooses anew and keeps the
	// joined credential until it has another: refused, it has the old.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "the join token is unknown, expired or already used", http.StatusUnauthorized)
	}))
	defer refuse.Close()
	a, err := New(Options{Orchestrators: []string{refuse.URL}, JoinToken: "id.secret", Cluster: nopCluster{}, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer a.http.CloseIdleConnections()
	if _, err := a.join(t.Context(), kept); !errors.Is(err, ErrRefused) {
		t.Fatalf("refused re-join: %v", err)
	}
	if after, _ := creds.Load(t.Context()); after == nil || *after != *kept {
		t.Fatalf("a refused re-join left %+v, want %+v", after, kept)
	}
}

// The Secret keeps a pending credential as it keeps a joined one; a
// Secret naming half a cluster is no credential.
func TestSecretCredentialsKeepPending(t *testing.T) {
	kube := fake.NewClientset()
	s := SecretCredentials{Client: kube, Namespace: "argus-system", Name: "argus-agent"}
	ctx := t.Context()
	for _, c := range []Credential{{Credential: "chosen"}, {Cluster: appcontext.ClusterRef{Provider: "cp", Name: "edge"}, Credential: "chosen"}} {
		if err := s.Save(ctx, c); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(ctx); err != nil || got == nil || *got != c {
			t.Fatalf("kept %+v, loaded %+v %v", c, got, err)
		}
	}
	if err := s.Save(ctx, Credential{Cluster: appcontext.ClusterRef{Provider: "cp"}, Credential: "chosen"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx); err != nil || got != nil {
		t.Fatalf("half a cluster loaded as %+v %v", got, err)
	}
}

// The join's connection is closed once the agent has its credential: it
// would otherwise hold one of the orchestrator's connections (and its
// memory) for the idle timeout, for every agent of a fleet that joined.
func TestJoinLeavesNoConnectionOpen(t *testing.T) {
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"clusterProvider":"cp","cluster":"edge","credential":"c"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	a, err := New(Options{Orchestrators: []string{srv.URL}, JoinToken: "id.secret", RootCAs: roots, Cluster: nopCluster{}, Credentials: &memCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.join(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return open.Load() == 0, nil }); err != nil {
		t.Fatalf("%d connections still open after the join", open.Load())
	}
}
