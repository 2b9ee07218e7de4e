package orchestrator

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) {
	if render.IsWorker(os.Args[1:]) { // the apps' render workers
		os.Exit(render.WorkerMain(os.Args[2:]))
	}
	testenv.Main(m, func(s *testenv.Stores) { env = s })
}

// running is an App started by a test, stopped at cleanup.
type running struct {
	app    *App
	cancel context.CancelFunc
	done   chan error
	base   string
}

func start(t testing.TB, opts Options) *running {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	app, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{app: app, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- app.Run(ctx) }()
	select {
	case <-app.Ready():
	case err := <-r.done:
		cancel()
		t.Fatalf("app stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("app not ready after 60s")
	}
	r.base = "http://" + app.Addr().String()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return 10s after cancel")
	}
}

func (r *running) call(t testing.TB, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
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

func TestEmbeddedStoresKeepDataAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	r := start(t, Options{DataDir: dir})
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	r.stop(t)

	r = start(t, Options{DataDir: dir})
	if code, body := r.call(t, "GET", "/v2/projects/p1", ""); code != 200 || !strings.Contains(body, `"name":"p1"`) {
		t.Fatalf("after restart: %d %s", code, body)
	}
	if code, _ := r.call(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d", code)
	}
}

// With --etcd-endpoints and --mongo-uri the orchestrator uses those servers
// and starts none of its own.
func TestExternalStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	external, err := testenv.StartStores(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer external.Close()

	dataDir := t.TempDir()
	db := testenv.UniqueName("ext")
	r := start(t, Options{
		DataDir:       dataDir,
		EtcdEndpoints: external.EtcdEndpoints(),
		MongoURI:      external.MongoURI(),
		MongoDatabase: db,
	})
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"ext1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	n, err := external.Mongo.Client.Database(db).Collection("projects").CountDocuments(ctx, bson.M{"project": "ext1"})
	if err != nil || n != 1 {
		t.Fatalf("project in the external MongoDB: n=%d err=%v", n, err)
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("external mode wrote embedded data: %v", entries)
	}

	// Readiness really depends on the external etcd.
	if err := external.StopServers(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := r.call(t, "GET", "/readyz", "")
		if code == 503 && strings.Contains(body, "etcd") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after the external etcd stopped: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
}

func TestOptionsValidation(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "data-dir") {
		t.Fatalf("no data dir and no external stores: err = %v", err)
	}
	if _, err := New(Options{EtcdEndpoints: []string{"http://x"}, MongoURI: "mongodb://x"}); err != nil {
		t.Fatalf("external stores need no data dir: %v", err)
	}
}

func TestListenFailureClosesStores(t *testing.T) {
	dir := t.TempDir()
	app, err := New(Options{DataDir: dir, Listen: "256.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	err = app.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("err = %v", err)
	}
	// The stores were closed: the data dir can be opened again at once.
	r := start(t, Options{DataDir: dir})
	if code, _ := r.call(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d", code)
	}
}

// The runtime's profiles are served on --debug-listen alone, never on the
// API's port.
func TestProfilesOnTheirOwnPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debug := l.Addr().String()
	_ = l.Close()
	r := start(t, Options{DataDir: t.TempDir(), DebugListen: debug})
	resp, err := http.Get("http://" + debug + "/debug/pprof/heap")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("profiles on %s: %d", debug, resp.StatusCode)
	}
	if code, _ := r.call(t, "GET", "/debug/pprof/heap", ""); code == 200 {
		t.Fatal("the API's port serves profiles")
	}
	// The command line may carry --mongo-uri's password.
	resp, err = http.Get("http://" + debug + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatal("the command line is served")
	}
	// Checked from the address alone: nothing is dialled or resolved.
	for _, addr := range []string{":6060", "0.0.0.0:6060", "10.0.0.1:6060", "[::]:6060", "debug.example:6060"} {
		if _, err := New(Options{DataDir: t.TempDir(), DebugListen: addr}); err == nil {
			t.Errorf("--debug-listen %s accepted", addr)
		}
	}
}

// A heartbeat as long as the silence that follows a missed one would make
// every idle agent's monitor Silent between its reports: refused.
func TestHeartbeatShorterThanSilence(t *testing.T) {
	for _, o := range []Options{
		{MonitorSilentAfter: 10 * time.Second},
		{Fleet: FleetOptions{Heartbeat: 30 * time.Second}},
		{MonitorSilentAfter: 20 * time.Second, Fleet: FleetOptions{Heartbeat: time.Minute}},
		{MonitorSilentAfter: 800 * time.Millisecond, Fleet: FleetOptions{Heartbeat: 500 * time.Millisecond}}, // agents report every second
		{MonitorSilentAfter: -time.Second},
		{Fleet: FleetOptions{Heartbeat: -time.Second}},
		{Fleet: FleetOptions{LastSeenInterval: -time.Second}},
	} {
		o.DataDir = t.TempDir()
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "--fleet-heartbeat") {
			t.Errorf("silent after %s, heartbeat %s: %v, want a refusal naming --fleet-heartbeat", o.MonitorSilentAfter, o.Fleet.Heartbeat, err)
		}
	}
}
