package hub

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/agent"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// serveTLS serves the hub and an API stand-in (it answers with the
// request's protocol) on one TLS port, as the orchestrator does: HTTP/1.1,
// h2 and the agents' native protocol. It returns the https URL and the
// roots that verify it.
func (f *fixture) serveTLS(t *testing.T, native bool) (string, *x509.CertPool) {
	t.Helper()
	ln, cfg, roots := tlsListener(t)
	srv := &http.Server{Handler: f.hub.Handler(http.HandlerFunc(protoAPI)), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, TLSConfig: cfg}
	srv.Protocols = new(http.Protocols) // as the orchestrator's serveHTTP2
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	serve := func() { _ = srv.ServeTLS(ln, "", "") }
	if native {
		nl := f.hub.ListenTLS(srv, ln, ListenOptions{})
		serve = func() { _ = srv.Serve(nl) }
	}
	served := make(chan struct{})
	go func() { defer close(served); serve() }()
	t.Cleanup(func() { f.hub.Stop(); _ = srv.Close(); <-served })
	return "https://" + ln.Addr().String(), roots
}

// tlsListener is a loopback listener and a server TLS configuration for
// it, with the roots that verify it.
func tlsListener(t testing.TB) (net.Listener, *tls.Config, *x509.CertPool) {
	t.Helper()
	pair := testcert.New(t, "argus")
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, pair.Pool()
}

// protoAPI stands in for the API: it answers with the request's protocol.
func protoAPI(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Proto) }

// tlsAgent runs the real agent code against url until the test ends.
func tlsAgent(t *testing.T, url string, roots *x509.CertPool, creds *memCredentials) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Options{Orchestrators: []string{url}, RootCAs: roots, Cluster: newMemCluster(), Credentials: creds,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, a.Run)
	return a
}

// streamingOverTLS is a hub on a TLS port (natively served or not) and
// edge's agent streaming to it on the transport that implies.
func streamingOverTLS(t *testing.T, native bool) (*fixture, *agent.Agent, string, *x509.CertPool) {
	t.Helper()
	f := newFixture(t)
	url, roots := f.serveTLS(t, native)
	a := tlsAgent(t, url, roots, f.joined(t, edge))
	transport := transportHTTP2
	if native {
		transport = transportNative
	}
	waitFor(t, "the agent streaming on "+transport, func() bool { return a.Connected() && f.streams(transport) == 1 })
	return f, a, url, roots
}

func (f *fixture) streams(transport string) float64 {
	var m dto.Metric
	_ = f.hub.metrics.streams.WithLabelValues(transport).Write(&m)
	return m.GetGauge().GetValue()
}

// An agent over TLS streams on gRPC's own transport, a client that offers
// only h2 (an L7 proxy, an older agent) through net/http's, and the API
// answers HTTP/1.1 and h2 on the same port.
func TestTLSPortServesNativeH2AndAPI(t *testing.T) {
	f, _, url, roots := streamingOverTLS(t, true)

	// A gRPC client offering h2 only, with the agent's credential for
	// another cluster.
	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	creds := f.joined(t, other)
	cc, err := grpc.NewClient("dns:///"+url[len("https://"):],
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+creds.c.Credential)
	stream, err := pb.NewFleetClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &pb.Hello{ClusterProvider: other.Provider, Cluster: other.Name}
	if err := stream.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("h2 client: first answer %v, %v; want a Welcome", m, err)
	}
	if got := f.streams(transportHTTP2); got != 1 {
		t.Fatalf("%v streams on http2, want the h2-only client's", got)
	}

	for _, c := range []struct {
		proto string
		tr    *http.Transport
	}{
		{"HTTP/1.1", &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}},
		{"HTTP/2.0", &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}},
	} {
		resp, err := (&http.Client{Transport: c.tr}).Get(url + "/v2/projects")
		if err != nil {
			t.Fatalf("%s: %v", c.proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		c.tr.CloseIdleConnections()
		if resp.StatusCode != http.StatusOK || string(body) != c.proto {
			t.Errorf("API over %s: %d %q", c.proto, resp.StatusCode, body)
		}
	}
	if f.streams(transportNative) != 1 {
		t.Fatalf("the native stream did not last")
	}
}

// Without ListenTLS (an older orchestrator) the same agent negotiates
// h2 and streams through Handler.
func TestAgentFallsBackToH2(t *testing.T) {
	f, _, _, _ := streamingOverTLS(t, false)
	if f.streams(transportNative) != 0 {
		t.Fatal("a native stream without ListenTLS")
	}
}

// Hub.Stop ends the native streams and their connections (the agent sees
// its stream end and keeps retrying, refused); TestMain's goleak checks
// that nothing of them is left.
func TestStopEndsNativeStreams(t *testing.T) {
	f, a, url, roots := streamingOverTLS(t, true)
	f.hub.Stop()
	waitFor(t, "the agent disconnected", func() bool { return !a.Connected() && f.streams(transportNative) == 0 })
	// A connection that negotiates the protocol now is closed at once.
	conn, err := tls.Dial("tcp", url[len("https://"):], &tls.Config{RootCAs: roots, NextProtos: []string{pb.ALPN}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if p := conn.ConnectionState().NegotiatedProtocol; p != pb.ALPN {
		t.Fatalf("negotiated %q, want %q", p, pb.ALPN)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var timeout net.Error
	if n, err := conn.Read(make([]byte, 1)); err == nil || (errors.As(err, &timeout) && timeout.Timeout()) {
		t.Fatalf("read %d bytes, %v, from a stopped hub's native connection; want it closed", n, err)
	}
}

// goroutinesIn counts this process's goroutines with fn on their stack.
func goroutinesIn(fn string) int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// A native stream's handler does the receiving, and its sender runs only
// while there is something to send: an idle agent costs the hub no
// goroutine of the session's beside the handler. The hub ends such a
// session by closing its connection; a stream refused for what its agent
// sent still gets its status.
func TestNativeSessionGoroutines(t *testing.T) {
	f, a, url, roots := streamingOverTLS(t, true)
	waitFor(t, "the handler receiving and no sender", func() bool {
		return goroutinesIn("hub.(*session).serveOwnConn") == 1 && goroutinesIn("hub.(*session).sendAll") == 0 &&
			goroutinesIn("hub.(*session).serveShared") == 0
	})

	// A rogue client on the native protocol, with another cluster's
	// credential, asking for more manifests than a request may name.
	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	creds := f.joined(t, other)
	cc, err := grpc.NewClient("passthrough:///"+url[len("https://"):],
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, NextProtos: []string{pb.ALPN}})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	st, err := pb.NewFleetClient(cc).Connect(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+creds.c.Credential))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{ClusterProvider: other.Provider, Cluster: other.Name}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("first answer %v, %v; want a Welcome", m, err)
	}
	if f.streams(transportNative) != 2 {
		t.Fatalf("%v native streams, want 2", f.streams(transportNative))
	}
	if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: &pb.BlobRequest{Sha256: make([]string, maxBlobRequest+1)}}}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := st.Recv()
		if err == nil {
			continue // the catch-up
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("the refused stream ended with %v, want InvalidArgument", err)
		}
		break
	}

	// The hub ends the agent's session (its cluster deleted): closing the
	// connection ends the handler's Recv.
	if err := f.join.Revoke(t.Context(), edge); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session over", func() bool {
		return !a.Connected() && f.streams(transportNative) == 0 && goroutinesIn("hub.(*session).serveOwnConn") == 0
	})
}
