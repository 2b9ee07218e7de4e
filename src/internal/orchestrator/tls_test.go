package orchestrator

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// client trusts pool and keeps no connection open, so each request shakes
// hands anew (and sees a rotated certificate) and nothing outlives the test.
func client(pool *x509.CertPool, maxVersion uint16) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool, MaxVersion: maxVersion},
	}}
}

type answer struct {
	code int
	body string
	peer string // the server certificate's common name
}

func get(c *http.Client, url, token string) (answer, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, body: string(b)}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		a.peer = resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	return a, err
}

// The orchestrator serving HTTPS with bearer tokens, as a production
// deployment runs it, and both secrets rotated under it.
func TestTLSAndTokens(t *testing.T) {
	secrets := t.TempDir()
	first, second := testcert.New(t, "first"), testcert.New(t, "second")
	certFile, keyFile := first.Write(t, secrets)
	tokenFile := filepath.Join(secrets, "tokens")
	testcert.WriteFile(t, tokenFile, []byte("# operators\nops-token\n"))

	r := start(t, Options{DataDir: t.TempDir(), TLSCertFile: certFile, TLSKeyFile: keyFile, AuthTokenFile: tokenFile,
		FileCheckInterval: 10 * time.Millisecond})
	base := "https://" + r.app.Addr().String()
	trusted := client(first.Pool(), 0)

	for _, c := range []struct {
		path, token string
		code        int
	}{
		{"/v2/projects", "ops-token", 200},
		{"/v2/projects", "", 401},
		{"/v2/projects", "wrong", 401},
		{"/metrics", "", 401},
		{"/healthz", "", 200},
		{"/readyz", "", 200},
	} {
		a, err := get(trusted, base+c.path, c.token)
		if err != nil {
			t.Fatalf("GET %s over HTTPS: %v", c.path, err)
		}
		if a.code != c.code {
			t.Fatalf("GET %s with token %q: %d %s, want %d", c.path, c.token, a.code, a.body, c.code)
		}
	}

	// Plain HTTP reaches no handler.
	if a, err := get(client(nil, 0), "http://"+r.app.Addr().String()+"/healthz", ""); err == nil && a.code == 200 {
		t.Fatalf("plain HTTP was served: %d %s", a.code, a.body)
	}
	// An unknown certificate authority is refused by the client.
	if _, err := get(client(x509.NewCertPool(), 0), base+"/healthz", ""); err == nil {
		t.Fatal("a client not trusting the certificate got through")
	}
	// TLS 1.1 and older are refused by the server.
	if _, err := get(client(first.Pool(), tls.VersionTLS11), base+"/healthz", ""); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("TLS 1.1 handshake: err = %v, want a protocol version error", err)
	}

	// Rotation: new certificate and key, new token; no restart.
	second.Write(t, secrets)
	testcert.WriteFile(t, tokenFile, []byte("next-token\n"))
	pool := first.Pool()
	pool.AddCert(second.Cert)
	both := client(pool, 0)
	deadline := time.Now().Add(15 * time.Second)
	for {
		a, err := get(both, base+"/v2/projects", "next-token")
		if err == nil && a.code == 200 && a.peer == "second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotation not in force after 15s: %+v, %v", a, err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if a, err := get(both, base+"/v2/projects", "ops-token"); err != nil || a.code != 401 {
		t.Fatalf("the removed token: %+v, %v; want 401", a, err)
	}
}

func TestSecretOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testcert.New(t, "x").Write(t, dir)
	missing := filepath.Join(dir, "missing")
	for name, c := range map[string]struct {
		opts Options
		want string
	}{
		"cert without key":   {Options{TLSCertFile: certFile}, "give both or neither"},
		"key without cert":   {Options{TLSKeyFile: keyFile}, "give both or neither"},
		"missing cert":       {Options{TLSCertFile: missing, TLSKeyFile: keyFile}, "--tls-cert-file"},
		"swapped files":      {Options{TLSCertFile: keyFile, TLSKeyFile: certFile}, "--tls-cert-file"},
		"missing token file": {Options{AuthTokenFile: missing}, "--auth-token-file"},
	} {
		c.opts.DataDir = dir
		if _, err := New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", name, err, c.want)
		}
	}
	if _, err := New(Options{DataDir: dir, TLSCertFile: certFile, TLSKeyFile: keyFile}); err != nil {
		t.Fatalf("a valid pair: %v", err)
	}
}
