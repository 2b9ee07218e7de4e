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
)

// A client that opens a connection and never handshakes holds up no other
// client, and is cut once the handshake's time (the server's shortest
// timeout, 500 ms here) is up; plain HTTP on the TLS port is told so.
func TestSplitListenerHandshakes(t *testing.T) {
	f, _, url, roots := streamingOverTLS(t, true)
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
}
