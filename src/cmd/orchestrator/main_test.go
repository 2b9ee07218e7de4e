package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/config"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// The test binary doubles as the orchestrator: with ARGUS_TEST_RUN_MAIN set it
// runs main's code, so process tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("ARGUS_TEST_RUN_MAIN") == "1" {
		limitOpenFiles(os.Getenv("ARGUS_TEST_NOFILE")) // a small machine, for TestDescriptorHeadroom
		os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
	}
	testenv.Main(m, func(*testenv.Stores) {})
}

type proc struct {
	cmd      *exec.Cmd
	addr     string
	grpcAddr string      // the gRPC status notification port, when --grpc-listen is set
	logs     chan string // remaining stderr lines
	done     chan error
}

// startProc runs the orchestrator as a child process and waits for it to serve.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--listen", "127.0.0.1:0", "--log-level", "info"}, args...)...)
	cmd.Env = append(append(os.Environ(), "ARGUS_TEST_RUN_MAIN=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: make(chan string, 1000), done: make(chan error, 1)}
	addr, grpcAddr := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "orchestrator serving" {
				addr <- entry.Addr
			}
			if entry.Msg == "gRPC status notifications serving" {
				grpcAddr <- entry.Addr
			}
			select {
			case p.logs <- line:
			default:
			}
		}
		close(p.logs)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.addr = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatal("orchestrator did not serve within 60s")
	}
	select {
	case p.grpcAddr = <-grpcAddr:
	default:
	}
	return p
}

// terminate sends SIGTERM and returns how long the process took to exit.
func (p *proc) terminate(t *testing.T) (time.Duration, []string) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range p.logs {
		lines = append(lines, l)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, strings.Join(lines, "\n"))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30s after SIGTERM")
	}
	return time.Since(start), lines
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProcessServesPersistsAndStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, nil, "--data-dir", dir)
	if code, body := call(t, "POST", "http://"+p.addr+"/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	took, lines := p.terminate(t)
	t.Logf("exit after SIGTERM took %s", took)
	if took > 5*time.Second {
		t.Errorf("exit took %s, want under 5s", took)
	}
	logs := strings.Join(lines, "\n")
	for _, want := range []string{`"msg":"stores closed"`, `"msg":"orchestrator stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("shutdown log lacks %s:\n%s", want, logs)
		}
	}

	p = startProc(t, nil, "--data-dir", dir)
	if code, body := call(t, "GET", "http://"+p.addr+"/v2/projects/p1", ""); code != 200 {
		t.Fatalf("after restart: %d %s", code, body)
	}
	p.terminate(t)
}

// External stores named through the environment, as a container would.
func TestProcessWithExternalStoresFromEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ext, err := testenv.StartStores(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	dataDir := t.TempDir()
	p := startProc(t, []string{
		"ARGUS_ETCD_ENDPOINTS=" + strings.Join(ext.EtcdEndpoints(), ","),
		"ARGUS_MONGO_URI=" + ext.MongoURI(),
		"ARGUS_MONGO_DATABASE=fromenv",
	}, "--data-dir", dataDir)
	if code, body := call(t, "POST", "http://"+p.addr+"/v2/projects", `{"metadata":{"name":"e1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	n, err := ext.Mongo.Client.Database("fromenv").Collection("projects").CountDocuments(ctx, map[string]string{"project": "e1"})
	if err != nil || n != 1 {
		t.Fatalf("project in the external store: n=%d err=%v", n, err)
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) != 0 {
		t.Fatalf("embedded stores were started: %v", entries)
	}
	p.terminate(t)
}

func TestBadFlagsExit2(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{{"--log-level", "loud"}, {"--no-such-flag"}, {"extra-arg"},
		{"--tls-cert-file", missing}, {"--tls-key-file", missing}, {"--auth-token-file", missing},
		{"--read-timeout", "-1s"}, {"--max-connections", "-5"}, {"--callback-allow", "10.0.0.0/33"}} {
		var stderr strings.Builder
		if code := run(args, func(string) string { return "" }, &stderr); code != 2 {
			t.Errorf("run(%v) = %d, want 2; stderr: %s", args, code, stderr.String())
		}
	}
}

var update = flag.Bool("update", false, "rewrite generated docs")

// The configuration reference in docs/operations.md is generated from the
// flags; this keeps the two in step (`make docs` runs it with -update).
func TestConfigReferenceIsCurrent(t *testing.T) {
	testenv.CheckGenerated(t, "../../../docs/operations.md", "orchestrator flags", config.Reference(Flags(&settings{})), *update)
}

// Tokens and TLS configured through the environment, as a container is:
// the API needs the token, serves HTTPS only, and the token never reaches
// the log, even at debug level.
func TestProcessWithTokensAndTLSFromEnv(t *testing.T) {
	secrets := t.TempDir()
	pair := testcert.New(t, "argus")
	certFile, keyFile := pair.Write(t, secrets)
	const token = "s3cret-token-value"
	tokenFile := filepath.Join(secrets, "tokens")
	testcert.WriteFile(t, tokenFile, []byte("# test\n"+token+"\n"))
	p := startProc(t, []string{
		"ARGUS_AUTH_TOKEN_FILE=" + tokenFile,
		"ARGUS_TLS_CERT_FILE=" + certFile,
		"ARGUS_TLS_KEY_FILE=" + keyFile,
	}, "--data-dir", t.TempDir(), "--log-level", "debug")

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pair.Pool()}}}
	for _, c := range []struct {
		url, token string
		code       int
	}{
		{"https://" + p.addr + "/v2/projects", token, 200},
		{"https://" + p.addr + "/v2/projects", "", 401},
		{"https://" + p.addr + "/v2/projects", token + "x", 401},
		{"https://" + p.addr + "/healthz", "", 200},
		{"http://" + p.addr + "/healthz", "", 400}, // net/http's answer to plain HTTP on a TLS port
	} {
		req, err := http.NewRequest("GET", c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", c.url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Fatalf("GET %s with token %v: %d, want %d", c.url, c.token != "", resp.StatusCode, c.code)
		}
	}
	_, lines := p.terminate(t)
	logs := strings.Join(lines, "\n")
	if strings.Contains(logs, "s3cret") {
		t.Fatalf("the token reached the log:\n%s", logs)
	}
	if !strings.Contains(logs, `"status":401`) {
		t.Fatalf("refused requests were not logged:\n%s", logs)
	}
}
