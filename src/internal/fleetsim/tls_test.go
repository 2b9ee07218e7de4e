package fleetsim

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"
)

// ARGUS_FLEET_TLS=1 gives the deployment a certificate its clients
// verify, the orchestrator's TLS flags and https URLs; unset, nothing.
func TestBenchTLSSwitch(t *testing.T) {
	t.Setenv("ARGUS_FLEET_TLS", "")
	if d := (&deployment{tls: newBenchTLS(t, t.TempDir())}); d.tls != nil || d.scheme() != "http" || slices.Contains(d.flags(), "--tls-cert-file") {
		t.Fatalf("without ARGUS_FLEET_TLS: %+v %s %v", d.tls, d.scheme(), d.flags())
	}
	t.Setenv("ARGUS_FLEET_TLS", "1")
	d := &deployment{tls: newBenchTLS(t, t.TempDir())}
	flags := d.flags()
	if d.scheme() != "https" || !slices.Contains(flags, "--tls-cert-file") || !slices.Contains(flags, "--tls-key-file") ||
		slices.Contains(orchestratorFlags, "--tls-cert-file") {
		t.Fatalf("with ARGUS_FLEET_TLS=1: %s %v (shared flags %v)", d.scheme(), flags, orchestratorFlags)
	}
	if _, err := os.Stat(d.tls.caFile); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(d.tls.certFile, d.tls.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	hc := d.client(30 * time.Second)
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatalf("the bench client does not verify the bench certificate: %v", err)
	}
	_ = resp.Body.Close()
}
