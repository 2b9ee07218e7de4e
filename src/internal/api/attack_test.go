package api

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argus-mc/argus/src/internal/console"
	"github.com/argus-mc/argus/src/internal/gac"
	"github.com/argus-mc/argus/src/internal/status"
)

// TestGACUploadsAreBounded: GAC files become Kubernetes objects copied to
// every cluster of their app, so an upload larger than any object could be
// is refused at the door (it used to be stored and cloned per cluster).
func TestGACUploadsAreBounded(t *testing.T) {
	f := newFixture(t)
	dig := "/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups/d1"
	for _, s := range []struct{ path, body string }{
		{"/v2/projects", `{"metadata":{"name":"p1"}}`},
		{"/v2/projects/p1/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p1/composite-apps/ca/v1/deployment-intent-groups", `{"metadata":{"name":"d1"},"spec":{"compositeProfile":"cp","version":"r1"}}`},
		{dig + "/generic-k8s-intents", `{"metadata":{"name":"g1"}}`},
	} {
		if code, body, _ := f.do(t, "POST", s.path, s.body); code != 201 {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
	}
	res := dig + "/generic-k8s-intents/g1/resources"
	half := strings.Repeat("x", gac.MaxObjectBytes/2+1)
	many := strings.Repeat(`{"op":"test","path":"/kind","value":"ConfigMap"},`, gac.MaxPatchOps) + `{"op":"test","path":"/kind","value":"ConfigMap"}`
	for _, u := range []struct {
		name, path, meta, part string
		files                  map[string]string
		code                   int
		has                    string
	}{
		{"template", res, `{"metadata":{"name":"cm"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", map[string]string{"cm.yaml": "kind: ConfigMap\n#" + half + half}, 413, "larger than 3145728 bytes"},
		{"resource", res, `{"metadata":{"name":"cm"},"spec":{"app":"a","newObject":"true","resourceGVK":{"apiVersion":"v1","kind":"ConfigMap","name":"cm"}}}`,
			"file", nil, 201, ""},
		{"files", res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"}}}`,
			"files", map[string]string{"a.txt": half, "b.txt": half}, 413, "more than"},
		{"operations", res + "/cm/customizations", `{"metadata":{"name":"c1"},"spec":{"clusterSpecific":"false","clusterInfo":{"scope":"label","clusterProvider":"cp","mode":"allow"},
			"patchType":"json","patchJson":[` + many + `]}}`, "files", nil, 400, "operations"},
	} {
		body, hdr := filesBody(t, u.meta, u.part, u.files)
		code, got, _ := f.send(t, "POST", u.path, body, hdr)
		if code != u.code || !strings.Contains(got, u.has) {
			t.Errorf("%s: got %d %.200q, want %d containing %q", u.name, code, got, u.code, u.has)
		}
	}
}

type noChanges struct{}

func (noChanges) ListenAll(func()) func() { return func() {} }

// openOverview opens GET /v2/overview?watch=true and waits for its first
// event; it returns the response (nil body on refusal) and a closer.
func openOverview(t *testing.T, f *fixture) (*http.Response, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/v2/overview?watch=true", nil)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "id:") && !strings.HasPrefix(line, "event:") {
			t.Fatalf("first line %q, %v", line, err)
		}
	}
	return resp, func() { cancel(); _ = resp.Body.Close() }
}

// TestWatchStreamsAreCapped: a watch stream holds its connection for as
// long as its client likes; without a cap one caller could hold every
// connection the server allows, probes and all. Streams past MaxStreams
// are 503 with Retry-After, and a closed stream frees its place.
func TestWatchStreamsAreCapped(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) {
		o.Overview, o.Changes, o.MaxStreams = stubOverviewData{}, noChanges{}, 3
	})
	var closers []func()
	for range 3 {
		resp, done := openOverview(t, f)
		closers = append(closers, done)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream within the cap: %d", resp.StatusCode)
		}
	}
	resp, done := openOverview(t, f)
	done()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a stream over the cap: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Ordinary requests are not streams and still answer.
	if code, _, _ := f.do(t, "GET", "/v2/overview", ""); code != 200 {
		t.Fatalf("GET /v2/overview with the streams full: %d", code)
	}
	if code, body, _ := f.do(t, "GET", "/metrics", ""); code != 200 || !strings.Contains(body, "argus_http_open_streams 3") {
		t.Fatalf("metrics: %d, open streams not 3", code)
	}
	closers[0]()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, done := openOverview(t, f)
		done()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream never freed its place: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	for _, c := range closers[1:] {
		c()
	}
}

// TestOpenPathsDoNotOpenTheAPI: the console's paths are open; no spelling
// of a path through them reaches the API without a token.
func TestOpenPathsDoNotOpenTheAPI(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) {
		o.Console = console.Handler()
		o.Overview = stubOverviewData{}
		o.Tokens = tokenFunc(func(tok string) bool { return tok == "secret-token" })
	})
	f.srv.Client().CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, p := range []string{"/console/../v2/overview", "/console/%2e%2e/v2/overview", "/console/..%2fv2%2foverview",
		"//v2/overview", "/console//v2/overview", "/./v2/overview", "/console/x/../../v2/projects", "/console/%2fv2%2foverview"} {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
		req.URL.Opaque = p // sent as written, not cleaned by the client
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		_ = resp.Body.Close()
		t.Logf("%s: %d %s", p, resp.StatusCode, resp.Header.Get("Location"))
		if strings.Contains(string(buf[:n]), "deploymentIntentGroups") || resp.StatusCode == http.StatusOK && !strings.Contains(resp.Header.Get("Content-Type"), "text/") {
			t.Errorf("%s answered %d %q without a token", p, resp.StatusCode, buf[:n])
		}
	}
}

// TestAnswersAreNeverPages: what callers named comes back in JSON and text
// answers; a browser must not sniff them into HTML or frame them, while
// the console keeps its own policy.
func TestAnswersAreNeverPages(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) { o.Console = console.Handler() })
	f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p1","description":"<script>alert(1)</script>"}}`)
	for _, p := range []string{"/v2/projects/p1", "/v2/projects/nope", "/no/such/<b>path</b>"} {
		_, _, h := f.do(t, "GET", p, "")
		if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: headers %v", p, h)
		}
	}
	_, _, h := f.do(t, "GET", "/", "")
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "sandbox") {
		t.Errorf("console CSP %q", csp)
	}
}

// bareServer is a server without routes or stores, for the decoders.
func bareServer(t testing.TB, opts Options) *server {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxBodyMemory = cmp.Or(opts.MaxBodyMemory, DefaultMaxBodyMemory)
	opts.BodyWait = cmp.Or(opts.BodyWait, DefaultBodyWait)
	opts.MaxJSONBody = cmp.Or(opts.MaxJSONBody, DefaultMaxJSONBody)
	return &server{opts: opts, metrics: m, bodies: newBodyBudget(opts.MaxBodyMemory, opts.MaxBodyMemoryPerCaller, opts.MaxJSONBody)}
}

// TestBodiesShareAMemoryBudget: request bodies are held while they are
// checked, so together they draw on one budget; a request that does not
// fit waits, then gets 503 with Retry-After. Small bodies pass beside the
// large ones of the same caller (part of the budget is theirs), and a
// caller holding its share waits while others pass. Before, every
// connection could hold 64 MiB.
func TestBodiesShareAMemoryBudget(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) { o.MaxBodyMemory, o.BodyWait = 8<<20, 300*time.Millisecond })
	f.do(t, "POST", "/v2/cluster-providers", `{"metadata":{"name":"cp"}}`)
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	// A cluster upload that declares 2,000,000 bytes and sends a few.
	conn := declareUpload(t, addr, "/v2/cluster-providers/cp/clusters", 2000000)
	waitFor(t, func() bool {
		_, body, _ := f.do(t, "GET", "/metrics", "")
		return strings.Contains(body, "argus_http_body_bytes_reserved 2e+06")
	})
	big := `{"metadata":{"name":"big","description":"` + strings.Repeat("x", 200<<10) + `"}}`
	for _, name := range []string{"small", "big"} {
		body := `{"metadata":{"name":"small"}}`
		if name == "big" {
			body = big
		}
		if code, got, _ := f.do(t, "POST", "/v2/projects", body); code != 201 {
			t.Fatalf("a %s JSON body beside the large upload: %d %.200s", name, code, got)
		}
	}
	// The same caller's second large upload does not fit its share.
	second := declareUpload(t, addr, "/v2/cluster-providers/cp/clusters", 2000000)
	code, resp := answerOf(t, second)
	if code != http.StatusServiceUnavailable || resp.Get("Retry-After") == "" {
		t.Fatalf("a second large upload of the same caller: %d %v", code, resp)
	}
	_ = conn.Close() // the large upload ends; its reservation goes back
	waitFor(t, func() bool {
		_, body, _ := f.do(t, "GET", "/metrics", "")
		return strings.Contains(body, "argus_http_body_bytes_reserved 0")
	})
}

// declareUpload sends the headers of a multipart upload declaring n bytes,
// and a few of them.
func declareUpload(t *testing.T, addr, path string, n int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n--b\r\n", path, n)
	return conn
}

// answerOf reads the status and headers the server answered on conn.
func answerOf(t *testing.T, conn net.Conn) (int, http.Header) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestUploadPartsAreReadUnderTheirKindsLimit: a file part is refused as
// soon as it passes what its kind can be (a kubeconfig 1 MiB, a chart the
// archive limit), not after 64 MiB of it are held.
func TestUploadPartsAreReadUnderTheirKindsLimit(t *testing.T) {
	f := newFixture(t)
	f.do(t, "POST", "/v2/cluster-providers", `{"metadata":{"name":"cp"}}`)
	body, hdr := filesBody(t, `{"metadata":{"name":"c1"}}`, "file", map[string]string{"kc": strings.Repeat("#", 5<<20)})
	code, got, _ := f.send(t, "POST", "/v2/cluster-providers/cp/clusters", body, hdr)
	if code != 413 || !strings.Contains(got, "larger than 1048576 bytes") {
		t.Fatalf("a 5 MiB kubeconfig: %d %.200q", code, got)
	}
	body, hdr = filesBody(t, `{"cloud-region":"r1","cloud-owner":"o"}`, "file", map[string]string{"kc": strings.Repeat("#", 5<<20)})
	if code, got, _ := f.send(t, "POST", "/v1/connectivity-info", body, hdr); code != 413 || !strings.Contains(got, "1048576") {
		t.Fatalf("a 5 MiB v1 kubeconfig: %d %.200q", code, got)
	}
}

// waitFor polls cond until it holds, for at most 30 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// countingOverview counts the overviews computed.
type countingOverview struct {
	stubOverviewData
	n atomic.Int64
}

func (c *countingOverview) Overview(ctx context.Context) (status.Overview, error) {
	c.n.Add(1)
	return c.stubOverviewData.Overview(ctx)
}

// firingChanges lets a test announce a change to every listener.
type firingChanges struct {
	mu        sync.Mutex
	listeners map[int]func()
	next      int
}

func (c *firingChanges) ListenAll(f func()) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listeners == nil {
		c.listeners = map[int]func(){}
	}
	id := c.next
	c.next++
	c.listeners[id] = f
	return func() { c.mu.Lock(); delete(c.listeners, id); c.mu.Unlock() }
}

func (c *firingChanges) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.listeners {
		f()
	}
}

// TestOverviewStreamsShareTheWork: an overview is a pass over every
// subject; N streams used to cost N passes per change, which a caller
// could multiply at will. Streams now share one per change.
func TestOverviewStreamsShareTheWork(t *testing.T) {
	counter, changes := &countingOverview{}, &firingChanges{}
	f := newFixtureWith(t, func(o *Options) { o.Overview, o.Changes = counter, changes })
	const streams = 10
	var readers []*bufio.Reader
	for range streams {
		resp, done := openOverview(t, f)
		defer done()
		readers = append(readers, bufio.NewReader(resp.Body))
	}
	if n := counter.n.Load(); n != streams {
		t.Fatalf("%d streams opened computed %d first overviews", streams, n)
	}
	changes.fire()
	for i, r := range readers {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, "event: overview") {
				break
			}
		}
	}
	if n := counter.n.Load() - streams; n > 3 {
		t.Fatalf("one change sent to %d streams computed %d overviews", streams, n)
	}
}

// Each caller (a token here) holds at most its share of the budget: while
// one caller's uploads hold theirs, another caller's upload passes, and
// the first caller's next one waits.
func TestBodyBudgetSharesPerCaller(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) {
		o.MaxBodyMemory, o.BodyWait, o.Tokens = 8<<20, 300*time.Millisecond, tokenSet{"a": true, "b": true}
	})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	upload := func(token string) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		fmt.Fprintf(conn, "POST /v2/cluster-providers/cp/clusters HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 2000000\r\n\r\n--b\r\n", token)
		return conn
	}
	reserved := func(want string) {
		t.Helper()
		waitFor(t, func() bool {
			_, body, _ := f.send(t, "GET", "/metrics", nil, map[string]string{"Authorization": "Bearer a"})
			return strings.Contains(body, "argus_http_body_bytes_reserved "+want)
		})
	}
	upload("a")
	reserved("2e+06")
	upload("b") // another caller: passes beside a's
	reserved("4e+06")
	if code, h := answerOf(t, upload("a")); code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("a's second upload beyond its share: %d %v", code, h)
	}
}

// A body that arrives slower than the minimum rate, once the grace has
// passed, is cut with 408 and its reservation goes back; before, it held
// both for the whole read timeout.
func TestTrickledBodiesAreCutByTheMinimumRate(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) { o.MinBodyRate, o.BodyRateGrace = 1<<10, 500*time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v2/projects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	stop := make(chan struct{})
	trickled := make(chan struct{})
	defer func() { close(stop); <-trickled }()
	go func() { // a byte a second, until the server cuts the connection
		defer close(trickled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	code, _ := answerOf(t, conn)
	if code != http.StatusRequestTimeout {
		t.Fatalf("a trickled body: %d, want 408", code)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("cut after %s", took)
	}
	waitFor(t, func() bool {
		_, body, _ := f.do(t, "GET", "/metrics", "")
		return strings.Contains(body, "argus_http_body_bytes_reserved 0")
	})
	// A body sent at once is unaffected, on the same server.
	if code, body, _ := f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"fast"}}`); code != 201 {
		t.Fatalf("a prompt body: %d %s", code, body)
	}
}

type tokenSet map[string]bool

func (t tokenSet) Valid(token string) bool { return t[token] }
