package hub

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/netutil"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// A client that opens a connection and never handshakes holds up no other
// client, and is cut once the handshake's time (the server's shortest
// timeout, 500 ms here) is up; plain HTTP on the TLS port is told so.
func TestSplitListenerHandshakes(t *testing.T) {
	f, _, url, roots := streamingOverTLS(t, transportNative)
	addr := strings.TrimPrefix(url, "https://")
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url + "/v2/projects")
	if err != nil {
		t.Fatalf("an API call beside a silent connection: %v", err)
	}
	_ = resp.Body.Close()

	_ = silent.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the silent connection: read %d bytes, %v; want it closed", n, err)
	}

	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, _ = io.WriteString(plain, "GET /v2/projects HTTP/1.1\r\nHost: argus\r\n\r\n")
	_ = plain.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(plain).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.0 400") {
		t.Fatalf("plain HTTP on the TLS port: %q, %v", line, err)
	}
	if f.streams(transportNative) != 1 {
		t.Fatal("the agent's native stream did not last")
	}
	failures := func(reason string) float64 {
		var m dto.Metric
		_ = f.hub.metrics.handshakeFailures.WithLabelValues(reason).Write(&m)
		return m.GetCounter().GetValue()
	}
	waitFor(t, "the failed handshakes counted by reason", func() bool {
		return failures(failedTimeout) == 1 && failures(failedPlainHTTP) == 1 && failures(failedError) == 0
	})
}

// With net/http's default protocols (srv.Protocols nil), h2 still works
// through ListenTLS; the connections net/http never sees — an agent's,
// and any in its handshake — are counted in ListenOptions.Open until they
// close, those it serves not (its ConnState counts them).
func TestListenTLSDefaultsAndCounts(t *testing.T) {
	f := newFixture(t)
	ln, cfg, roots := tlsListener(t)
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(protoAPI), TLSConfig: cfg}
	nl := f.hub.ListenTLS(srv, netutil.LimitListener(ln, 8), ListenOptions{Open: open})
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(nl) }()
	t.Cleanup(func() { f.hub.Stop(); _ = srv.Close(); <-served })
	gauge := func() float64 {
		var m dto.Metric
		_ = open.Write(&m)
		return m.GetGauge().GetValue()
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "HTTP/2.0" {
		t.Fatalf("served over %q, want HTTP/2.0", body)
	}
	waitFor(t, "net/http's connection uncounted", func() bool { return gauge() == 0 })

	agent, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, NextProtos: []string{pb.ALPN}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the native connection counted", func() bool { return gauge() == 1 })
	_ = agent.Close()
	waitFor(t, "the closed native connection uncounted", func() bool { return gauge() == 0 })
}
