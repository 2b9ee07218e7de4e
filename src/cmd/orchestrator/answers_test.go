package main

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// AnswerMBEnv sets the size, in MB, of the status answer that
// TestSlowReadersOfLargeAnswers leaves unread (issue 23's acceptance is 60):
//
//	ARGUS_ANSWER_MB=60 go test -run TestSlowReadersOfLargeAnswers -v ./src/cmd/orchestrator
//
// Unset, 12 MB: the same flow in a fraction of the time.
const AnswerMBEnv = "ARGUS_ANSWER_MB"

// Issue 23: a status answer was built whole in memory and kept until
// written: ten clients asking ?output=detail of a 60 MB status and never
// reading took 815 MiB. Now the answer is written as it is encoded, and a
// client that does not read is cut once a write makes no progress for
// --answer-write-timeout. 25 such clients: the orchestrator's RSS grows by
// at most 200 MiB, and every one of them is cut.
func TestSlowReadersOfLargeAnswers(t *testing.T) {
	mb := 12
	if v := os.Getenv(AnswerMBEnv); v != "" {
		var err error
		if mb, err = strconv.Atoi(v); err != nil || mb < 4 {
			t.Fatalf("%s=%q is not a size in MB (4 or more)", AnswerMBEnv, v)
		}
	}
	// Rendering 15 MB per app under -race on a loaded machine can pass the
	// default render limit, and the instantiate that waits for it the
	// default request limit (2 minutes: a CI run's EOF); rendering is not
	// what this test is about.
	p := startProc(t, nil, nil, "--data-dir", t.TempDir(), "--answer-write-timeout", "5s", "--render-timeout", "5m", "--write-timeout", "6m")
	base := "http://" + p.addr
	// The DIG's apps render 1 MB ConfigMaps, 15 per app, onto a cluster
	// that is not there (rsync retries): the answer is their manifests.
	apps := (mb + 14) / 15
	onboardLargeDIG(t, base, apps, mb)
	dig := base + "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/big"
	mustCall(t, 202, "POST", dig+"/approve", "")
	mustCall(t, 202, "POST", dig+"/instantiate", "")
	detail := dig + "/status?type=rsync&output=detail"
	var full int
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code, body := call(t, "GET", detail, "")
		if code == 200 && strings.Count(body, `"detail"`) == mb {
			full = len(body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DIG's %d manifests did not show in its status: %d %.300s", mb, code, body)
		}
		time.Sleep(time.Second) //nolint:forbidigo // polling with a deadline
	}
	t.Logf("the ?output=detail answer is %.1f MB; the orchestrator's Go heap in use: %d MiB", float64(full)/1e6, metric(t, p, "go_memstats_heap_inuse_bytes")>>20)
	before := rss(t, p)
	served := requestsServed(t, p)

	// 25 clients ask for it and never read.
	const clients = 25
	var conns []net.Conn
	for i := range clients {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: argus\r\n\r\n", strings.TrimPrefix(detail, base))
		conns = append(conns, c)
	}
	start := time.Now()
	peak := before
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // RSS, every 100 ms, until every client was cut
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if v, err := rssOf(p.cmd.Process.Pid); err == nil {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	deadline = time.Now().Add(3 * time.Minute)
	for requestsServed(t, p) < served+clients {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("%d of %d non-reading clients still held after 3 minutes", served+clients-requestsServed(t, p), clients)
		}
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // polling with a deadline
	}
	cut := time.Since(start)
	close(stop)
	<-sampled
	growth := (peak - before) >> 20
	t.Logf("%d clients not reading a %.1f MB answer: all cut %s after they asked; RSS %d MiB before, peak %d MiB (+%d MiB)",
		clients, float64(full)/1e6, cut.Round(100*time.Millisecond), before>>20, peak>>20, growth)
	// Each was cut: what it can still read ends short of the answer.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		if n >= int64(full) {
			t.Errorf("client %d read %d bytes: the whole answer, so it was not cut", i, n)
		}
	}
	if growth > 200 {
		t.Fatalf("RSS grew by %d MiB, want at most 200", growth)
	}
	p.terminate(t)
}

// onboardLargeDIG creates DIG p/ca/v1/big of n apps, which render mb
// ConfigMaps of 1 MB between them, placed on cluster cp/c1, whose API
// server does not answer.
func onboardLargeDIG(t *testing.T, base string, n, mb int) {
	t.Helper()
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	mustCall(t, 201, "POST", base+"/v2/cluster-providers", `{"metadata":{"name":"cp"}}`)
	upload(t, base+"/v2/cluster-providers/cp/clusters", `{"metadata":{"name":"c1"}}`, []byte(kubeconfig))
	mustCall(t, 201, "POST", base+"/v2/projects", `{"metadata":{"name":"p"}}`)
	mustCall(t, 201, "POST", base+"/v2/projects/p/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`)
	ca := base + "/v2/projects/p/composite-apps/ca/v1"
	mustCall(t, 201, "POST", ca+"/composite-profiles", `{"metadata":{"name":"cpf"}}`)
	mustCall(t, 201, "POST", ca+"/deployment-intent-groups", `{"metadata":{"name":"big"},"spec":{"compositeProfile":"cpf","version":"r1"}}`)
	dig := ca + "/deployment-intent-groups/big"
	mustCall(t, 201, "POST", dig+"/generic-placement-intents", `{"metadata":{"name":"gpi"}}`)
	mustCall(t, 201, "POST", dig+"/intents", `{"metadata":{"name":"intents"},"spec":{"intent":{"genericPlacementIntent":"gpi"}}}`)
	for i := range n {
		name := fmt.Sprintf("big%d", i)
		count := min(15, mb-15*i)
		chart := testenv.ArchiveFiles(t, map[string]string{
			"Chart.yaml": "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n",
			"templates/cm.yaml": `{{- range $i := until ` + strconv.Itoa(count) + ` }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $.Chart.Name }}-{{ $i }}
data:
  blob: {{ repeat 1000000 "x" | quote }}
{{- end }}
`})
		upload(t, ca+"/apps", `{"metadata":{"name":"`+name+`"}}`, chart)
		mustCall(t, 201, "POST", dig+"/generic-placement-intents/gpi/app-intents",
			`{"metadata":{"name":"`+name+`"},"spec":{"app":"`+name+`","intent":{"allOf":[{"clusterProvider":"cp","cluster":"c1"}]}}}`)
	}
}

func mustCall(t *testing.T, want int, method, url, body string) {
	t.Helper()
	if code, got := call(t, method, url, body); code != want {
		t.Fatalf("%s %s: %d %.300s, want %d", method, url, code, got, want)
	}
}

// upload POSTs a multipart upload: metadata and one file.
func upload(t *testing.T, url, metadata string, file []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("metadata", metadata)
	fw, _ := mw.CreateFormFile("file", "file")
	_, _ = fw.Write(file)
	_ = mw.Close()
	resp, err := http.Post(url, mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		t.Fatalf("upload %s: %d %.300s", url, resp.StatusCode, got)
	}
}

// requestsServed counts the status answers the orchestrator finished
// (written whole, or cut).
func requestsServed(t *testing.T, p *proc) int {
	t.Helper()
	_, body := call(t, "GET", "http://"+p.addr+"/metrics", "")
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "argus_http_requests_total{") && strings.Contains(line, `deployment-intent-groups/{deploymentIntentGroup}/status"`) &&
			strings.Contains(line, `method="GET"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

func rss(t *testing.T, p *proc) int64 {
	t.Helper()
	v, err := rssOf(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// rssOf reads a process's VmRSS, in bytes.
func rssOf(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// metric reads an unlabelled gauge or counter from /metrics (0 when absent).
func metric(t *testing.T, p *proc, name string) int64 {
	t.Helper()
	_, body := call(t, "GET", "http://"+p.addr+"/metrics", "")
	v, _ := testenv.Metric(body, name)
	return int64(v)
}
