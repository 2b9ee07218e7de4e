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
	"github.com/argus-mc/argus/src/internal/fleet/frame"
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

// streamingOverTLS is a hub on a TLS port and edge's agent streaming to
// it on transport: framed (ListenTLS), native (ListenTLS without the
// framed protocol: an orchestrator that predates it) or http2 (no
// ListenTLS: an older one still).
func streamingOverTLS(t *testing.T, transport string) (*fixture, *agent.Agent, string, *x509.CertPool) {
	t.Helper()
	f := newFixture(t, func(o *Options) { o.grpcOnly = transport == transportNative })
	url, roots := f.serveTLS(t, transport != transportHTTP2)
	a := tlsAgent(t, url, roots, f.joined(t, edge))
	waitFor(t, "the agent streaming on "+transport, func() bool { return a.Connected() && f.streams(transport) == 1 })
	return f, a, url, roots
}

func (f *fixture) streams(transport string) float64 {
	var m dto.Metric
	_ = f.hub.metrics.streams.WithLabelValues(transport).Write(&m)
	return m.GetGauge().GetValue()
}

// An agent over TLS streams on its own framing, a gRPC client that offers
// the native protocol (an older agent) on gRPC's own transport, one that
// offers only h2 (an L7 proxy) through net/http's, and the API answers
// HTTP/1.1 and h2 on the same port.
func TestTLSPortServesFramedNativeH2AndAPI(t *testing.T) {
	f, _, url, roots := streamingOverTLS(t, transportFramed)
	native := f.joined(t, appcontext.ClusterRef{Provider: "cp", Name: "edge03"})
	grpcStream(t, url, roots, native, appcontext.ClusterRef{Provider: "cp", Name: "edge03"}, pb.ALPN)
	if got := f.streams(transportNative); got != 1 {
		t.Fatalf("%v streams on native, want the older agent's", got)
	}

	// A gRPC client offering h2 only.
	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	grpcStream(t, url, roots, f.joined(t, other), other)
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
	if f.streams(transportFramed) != 1 || f.streams(transportNative) != 1 {
		t.Fatalf("the framed and native streams did not last")
	}
}

// grpcStream opens ref's stream with creds on gRPC, offering protos (none:
// h2 only), and waits for its Welcome.
func grpcStream(t *testing.T, url string, roots *x509.CertPool, creds *memCredentials, ref appcontext.ClusterRef, protos ...string) pb.Fleet_ConnectClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+url[len("https://"):],
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, NextProtos: protos})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	st, err := pb.NewFleetClient(cc).Connect(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+creds.c.Credential))
	if err != nil {
		t.Fatal(err)
	}
	welcomed(t, st, ref)
	return st
}

// welcomed sends ref's Hello on st and checks the hub answers with a
// Welcome.
func welcomed(t *testing.T, st pb.Fleet_ConnectClient, ref appcontext.ClusterRef) {
	t.Helper()
	if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{ClusterProvider: ref.Provider, Cluster: ref.Name}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("first answer %v, %v; want a Welcome", m, err)
	}
}

// framedStream opens ref's stream with creds on the framed protocol and
// waits for its Welcome.
func framedStream(t *testing.T, url string, roots *x509.CertPool, creds *memCredentials, ref appcontext.ClusterRef) *frame.ClientStream {
	t.Helper()
	c, err := tls.Dial("tcp", url[len("https://"):], &tls.Config{RootCAs: roots, NextProtos: []string{pb.FramedALPN}})
	if err != nil {
		t.Fatal(err)
	}
	fc := frame.NewConn(c, maxMessage)
	t.Cleanup(func() { _ = fc.Close() })
	st, err := frame.NewClientStream(t.Context(), fc, creds.c.Credential, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	welcomed(t, st, ref)
	return st
}

// Without ListenTLS (an older orchestrator) the same agent negotiates
// h2 and streams through Handler.
func TestAgentFallsBackToH2(t *testing.T) {
	f, _, _, _ := streamingOverTLS(t, transportHTTP2)
	if f.streams(transportNative) != 0 || f.streams(transportFramed) != 0 {
		t.Fatal("a native or framed stream without ListenTLS")
	}
}

// An orchestrator that serves gRPC natively but not the framed protocol
// (one that predates it) gets the agent on gRPC's own transport.
func TestAgentFallsBackToNativeGRPC(t *testing.T) {
	f, _, _, _ := streamingOverTLS(t, transportNative)
	if f.streams(transportFramed) != 0 {
		t.Fatal("a framed stream to an orchestrator that does not serve it")
	}
}

// Hub.Stop ends the framed and native streams and their connections (the
// agent sees its stream end and keeps retrying, refused); TestMain's
// goleak checks that nothing of them is left.
func TestStopEndsNativeStreams(t *testing.T) {
	for _, transport := range []string{transportFramed, transportNative} {
		t.Run(transport, func(t *testing.T) {
			f, a, url, roots := streamingOverTLS(t, transport)
			f.hub.Stop()
			waitFor(t, "the agent disconnected", func() bool { return !a.Connected() && f.streams(transport) == 0 })
			// A connection that negotiates the protocol now is closed at once.
			proto := map[string]string{transportFramed: pb.FramedALPN, transportNative: pb.ALPN}[transport]
			conn, err := tls.Dial("tcp", url[len("https://"):], &tls.Config{RootCAs: roots, NextProtos: []string{proto}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			if p := conn.ConnectionState().NegotiatedProtocol; p != proto {
				t.Fatalf("negotiated %q, want %q", p, proto)
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var timeout net.Error
			if n, err := conn.Read(make([]byte, 1)); err == nil || (errors.As(err, &timeout) && timeout.Timeout()) {
				t.Fatalf("read %d bytes, %v, from a stopped hub's connection; want it closed", n, err)
			}
		})
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
	f, a, url, roots := streamingOverTLS(t, transportNative)
	waitFor(t, "the handler receiving and no sender", func() bool {
		return goroutinesIn("hub.(*session).serveOwnConn") == 1 && goroutinesIn("hub.(*session).sendAll") == 0 &&
			goroutinesIn("hub.(*session).serveShared") == 0
	})

	// A rogue client on the native protocol, with another cluster's
	// credential, asking for more manifests than a request may name.
	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	st := grpcStream(t, url, roots, f.joined(t, other), other, pb.ALPN)
	if f.streams(transportNative) != 2 {
		t.Fatalf("%v native streams, want 2", f.streams(transportNative))
	}
	refusedForTooManyBlobs(t, st)

	// The hub ends the agent's session (its cluster deleted): closing the
	// connection ends the handler's Recv.
	if err := f.join.Revoke(t.Context(), edge); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session over", func() bool {
		return !a.Connected() && f.streams(transportNative) == 0 && goroutinesIn("hub.(*session).serveOwnConn") == 0
	})
}

// refusedForTooManyBlobs asks for more manifests than a request may name,
// and checks the stream ends with InvalidArgument.
func refusedForTooManyBlobs(t *testing.T, st pb.Fleet_ConnectClient) {
	t.Helper()
	if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: &pb.BlobRequest{Sha256: make([]string, maxBlobRequest+1)}}}); err != nil {
		t.Fatal(err)
	}
	endsWith(t, st, codes.InvalidArgument, "the refused stream")
}

// endsWith reads st, past what the hub still sends (the catch-up), until
// it ends, and checks it ends with code.
func endsWith(t *testing.T, st pb.Fleet_ConnectClient, code codes.Code, what string) {
	t.Helper()
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != code {
			t.Fatalf("%s ended with %v, want %v", what, err, code)
		}
		return
	}
}

// A framed connection holds one goroutine while its agent idles: the
// handler, which reads the frames, parked with the stream's start off its
// stack (see openFramed); no gRPC transport goroutine serves it.
// A stream the hub ends (its cluster deleted) and one refused for what it
// sent both get their status.
func TestFramedSessionGoroutines(t *testing.T) {
	f, a, url, roots := streamingOverTLS(t, transportFramed)
	waitFor(t, "one goroutine for the framed connection", func() bool {
		return goroutinesIn("hub.(*framed).serve.func1") == 1 && goroutinesIn("hub.(*session).serveOwnConn") == 1 &&
			goroutinesIn("hub.(*Hub).open(") == 0 && goroutinesIn("hub.(*session).sendAll") == 0 &&
			goroutinesIn("transport.(*http2Server)") == 0
	})

	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	st := framedStream(t, url, roots, f.joined(t, other), other)
	if err := f.join.Revoke(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	endsWith(t, st, codes.Unauthenticated, "the deleted cluster's stream")

	third := appcontext.ClusterRef{Provider: "cp", Name: "edge03"}
	refusedForTooManyBlobs(t, framedStream(t, url, roots, f.joined(t, third), third))
	waitFor(t, "only the agent's stream left", func() bool {
		return a.Connected() && f.streams(transportFramed) == 1 && goroutinesIn("hub.(*framed).serve.func1") == 1
	})
}

// A stream refused before the hub read what its agent sent (an unknown
// credential; the Hello right behind it) gets its status. (The hub
// lingers rather than close with the Hello unread, which resets the
// connection; on loopback the reset does not lose the status, so this
// checks the refusal path, not the linger: that is for real links, where
// a status still in flight goes with the reset.)
func TestFramedRefusalReachesTheAgent(t *testing.T) {
	_, _, url, roots := streamingOverTLS(t, transportFramed)
	for range 10 {
		c, err := tls.Dial("tcp", url[len("https://"):], &tls.Config{RootCAs: roots, NextProtos: []string{pb.FramedALPN}})
		if err != nil {
			t.Fatal(err)
		}
		fc := frame.NewConn(c, maxMessage)
		st, err := frame.NewClientStream(t.Context(), fc, "not-a-credential", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{ClusterProvider: "cp", Cluster: "x"}}}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		_ = fc.Close()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a refused stream ended with %v, want Unauthenticated", err)
		}
	}
}
