package fleetsim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// BenchmarkFleet (make bench-fleet): for each size in ARGUS_FLEET_SIZES
// (comma-separated; the benchmark is skipped without it) on
// ARGUS_FLEET_REPLICAS replicas (1: one orchestrator on embedded stores;
// 3: scripts/ha-up.sh), simulated pull clusters join, a DIG places one app
// of 5 ConfigMaps on every one, and it prints the line issue 26 names:
//
//	fleet: clusters=N replicas=R rss_kib_per_cluster=… cpu_ms_per_min_per_cluster=… reconnect_s=… instantiate_s=…
//	       status_summary_p50_ms=… status_all_p50_ms=… callback_p50_ms=… callback_p99_ms=…
//	       etcd_keys_per_change=… etcd_bytes_per_change=… rss_settled_kib_per_cluster=… lost=…
//
// Memory and CPU are the replicas' own (/proc), idle for a minute (a
// fifth of the last-seen writes' cycle, at its steady rate), less what
// they used before any cluster joined; the
// settled memory is the same reading ARGUS_FLEET_SETTLE_S (150) seconds
// later, the fleet still idle (printed before lost); churn
// is 10,000 changes a minute over the fleet for ARGUS_FLEET_CHURN_S (60)
// seconds; lost counts the changes
// the simulator made that no callback named within 30 s; etcd keys and
// bytes per change are everything etcd took during the churn (a watch on
// all keys), divided by the changes. ARGUS_FLEET_HEAP=DIR has the
// replicas serve their profiles (--debug-listen) and saves to DIR their
// heap, runtime statistics and goroutines after the settled reading (or
// the idle window, without it), CPU profiles, and the agents' log.
//
// The churn's subscriber asks for type=cluster output=summary: each
// callback carries the changed resources and the DIG's counts.
// ARGUS_FLEET_SUB_OUTPUT=all makes it ask for the whole answer in every
// callback, as the default subscription does (tens of megabytes at
// 10,000 clusters, built and sent per callback).
//
// ARGUS_FLEET_TLS=1 serves the replicas' API over HTTPS with a test CA
// the agents are given, as production agents reach it: their streams
// then come on the native transport (docs/fleet.md); without it they
// speak plain http to loopback, through net/http's HTTP/2.
func BenchmarkFleet(b *testing.B) {
	sizes := os.Getenv("ARGUS_FLEET_SIZES")
	if sizes == "" {
		b.Skip("ARGUS_FLEET_SIZES is not set (make bench-fleet sets it)")
	}
	replicas, _ := strconv.Atoi(os.Getenv("ARGUS_FLEET_REPLICAS"))
	if replicas <= 0 {
		replicas = 1
	}
	churnFor := 60 * time.Second
	if s, err := strconv.Atoi(os.Getenv("ARGUS_FLEET_CHURN_S")); err == nil && s > 0 {
		churnFor = time.Duration(s) * time.Second
	}
	// ARGUS_FLEET_SETTLE_S=0 skips the settled memory reading.
	settle := 150 * time.Second
	if s, err := strconv.Atoi(os.Getenv("ARGUS_FLEET_SETTLE_S")); err == nil && s >= 0 {
		settle = time.Duration(s) * time.Second
	}
	output := cmp.Or(os.Getenv("ARGUS_FLEET_SUB_OUTPUT"), "summary")
	bin := testenv.BuildOrchestrator(b, b.TempDir())
	for b.Loop() {
		for _, s := range strings.Split(sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				b.Fatalf("ARGUS_FLEET_SIZES: %q", s)
			}
			r := runFleet(b, bin, n, replicas, churnFor, settle, output)
			fmt.Println(r.line())
		}
	}
}

type fleetResult struct {
	clusters, replicas               int
	rssKiB, cpuMs, settledKiB        float64
	reconnect, instantiate           time.Duration
	summaryP50, allP50, cbP50, cbP99 time.Duration
	changes, lost                    int
	// etcdKeys and etcdBytes are what etcd took per change under churn
	// (everything written meanwhile; -1 when etcd was not found).
	etcdKeys, etcdBytes float64
}

func (r fleetResult) line() string {
	return testenv.FleetLine{Clusters: r.clusters, Replicas: r.replicas, RSSKiB: r.rssKiB, CPUMs: r.cpuMs,
		Reconnect: r.reconnect, Instantiate: r.instantiate, SummaryP50: r.summaryP50, AllP50: r.allP50,
		CbP50: r.cbP50, CbP99: r.cbP99, EtcdKeys: r.etcdKeys, EtcdBytes: r.etcdBytes, SettledRSSKiB: r.settledKiB, Lost: r.lost}.String()
}

const (
	benchCA  = "/v2/projects/fleet/composite-apps/fleet/v1"
	benchDIG = benchCA + "/deployment-intent-groups/fleet-dig"
)

func runFleet(b *testing.B, bin string, n, replicas int, churnFor, settle time.Duration, output string) fleetResult {
	dir := b.TempDir()
	var d *deployment
	if replicas == 1 {
		d = startSingle(b, bin, dir)
	} else {
		d = startHA(b, bin, dir, replicas)
	}
	defer d.stop()
	a := api{tb: b, base: d.urls[0], hc: d.client(2 * time.Minute)}
	res := fleetResult{clusters: n, replicas: replicas}
	rss0, _ := d.usage()

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%05d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tokens, err := Register(ctx, RegisterOptions{API: d.urls[0], Provider: "fleet", Clusters: names, Label: "fleet",
		HTTP: d.client(30 * time.Second)})
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Orchestrators: d.urls, Tokens: tokens, Seed: 26, RootCAs: d.roots()}
	if dir := os.Getenv("ARGUS_FLEET_HEAP"); dir != "" { // the agents' warnings, kept with the profiles
		opts.Logger = agentLog(b, filepath.Join(dir, fmt.Sprintf("agents-%d.log", n)))
	}
	f, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = f.Run(ctx)
	}()
	defer func() {
		cancel()
		<-ran
	}()
	took := waitConnected(b, f, n)
	b.Logf("%d clusters registered and connected (%s to connect)", n, took.Round(time.Millisecond))

	onboardBench(b, a)
	a.must(202, "POST", benchDIG+"/approve", nil)
	start := time.Now()
	cpuBefore := d.cpuByProcess()
	instSaved := d.saveCPU(fmt.Sprintf("instantiate-%d", n), 30*time.Second)
	var stopInstCount func() map[string]testenv.Writes
	if ep := d.etcdEndpoint(); ep != "" {
		if stopInstCount, err = testenv.CountWritesByPrefix(ep); err != nil {
			b.Logf("cannot count etcd writes: %v", err)
		}
	}
	a.must(202, "POST", benchDIG+"/instantiate", nil)
	pollCount(b, 10*time.Minute, "every resource Applied", 5*n, func() int { return applied(a) })
	res.instantiate = time.Since(start)
	b.Logf("CPU while instantiating (s): %s", d.cpuSince(cpuBefore))
	if stopInstCount != nil {
		b.Logf("etcd writes while instantiating: %s", formatWrites(stopInstCount()))
	}
	<-instSaved
	pollCount(b, 5*time.Minute, "every resource Ready", 5*n, func() int { return ready(a) })

	measureIdle(b, d, n, rss0, settle, &res)

	res.summaryP50 = statusP50(a, "type=cluster&output=summary")
	res.allP50 = statusP50(a, "type=cluster&output=all")

	stopProfile := profile(b, fmt.Sprintf("churn-%d", n))
	cpuSaved := d.saveCPU(fmt.Sprintf("churn-%d", n), min(churnFor, 30*time.Second))
	res.etcdKeys, res.etcdBytes = -1, -1
	var stopCount func() (int64, int64)
	if ep := d.etcdEndpoint(); ep != "" {
		if stopCount, err = testenv.CountWrites(ep); err != nil {
			b.Logf("cannot count etcd writes: %v", err)
		}
	}
	d.saveMetrics("before-churn-" + fmt.Sprint(n))
	res.cbP50, res.cbP99, res.changes, res.lost = churn(b, a, f, churnFor, output)
	d.saveMetrics("after-churn-" + fmt.Sprint(n))
	if stopCount != nil && res.changes > 0 {
		keys, bytes := stopCount()
		res.etcdKeys, res.etcdBytes = float64(keys)/float64(res.changes), float64(bytes)/float64(res.changes)
	}
	stopProfile()
	<-cpuSaved
	if errs := f.Errors(); len(errs) > 0 {
		b.Fatalf("agents stopped: %v", errs[0])
	}
	res.reconnect = restart(b, d, f, n)
	return res
}

// measureIdle fills res's idle memory and CPU, and its settled memory
// when settle is positive: the replicas' growth since rss0, per cluster.
func measureIdle(b *testing.B, d *deployment, n int, rss0 int64, settle time.Duration, res *fleetResult) {
	// Idle: what the replicas use with every cluster connected and Ready,
	// after 15 s for what the instantiation left (history, sync state) to
	// settle.
	<-time.After(15 * time.Second) // a settling window, not a synchronisation
	// A minute: the hub writes each connected cluster's last-seen time
	// once a LastSeenInterval (5 minutes), the first time at a random
	// point of it from the connection, so any minute sees a fifth of the
	// fleet's writes, as a fleet running for hours does.
	idle := time.Minute
	stopProfile := profile(b, fmt.Sprintf("idle-%d", n))
	idleSaved := d.saveCPU(fmt.Sprintf("idle-%d", n), idle)
	_, cpu0 := d.usage()
	t0 := time.Now()
	<-time.After(idle) // the measuring window, not a synchronisation
	rss1, cpu1 := d.usage()
	stopProfile()
	<-idleSaved
	res.rssKiB = float64(rss1-rss0) / float64(n)
	res.cpuMs = float64(cpu1-cpu0) / time.Since(t0).Minutes() / float64(n)
	// Settled: the same idle fleet a while later. The minute above ends
	// 75 s after the instantiation, whose heap and grown goroutine stacks
	// the runtime gives back only after its next collections; an idle
	// process collects at least every 2 minutes (the runtime's forced GC),
	// halving oversized stacks each time, and returns heap above its goal
	// in the background. Nothing here forces a collection: the heap
	// profile (which does) is taken after this reading.
	if settle > 0 {
		<-time.After(settle) // the measuring window, not a synchronisation
		rss2, _ := d.usage()
		res.settledKiB = float64(rss2-rss0) / float64(n)
	}
	d.saveHeap(fmt.Sprintf("idle-%d", n))
}

// profile writes a CPU profile (and a heap profile at its end) of this
// process to ARGUS_FLEET_PROFILE/<name>.{cpu,heap}.pprof when that is set
// (the orchestrator then runs in this process).
func profile(b *testing.B, name string) func() {
	dir := os.Getenv("ARGUS_FLEET_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(time.Millisecond))
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		for _, p := range []string{"mutex", "block"} {
			pf, err := os.Create(filepath.Join(dir, name+"."+p+".pprof"))
			if err != nil {
				b.Fatal(err)
			}
			_ = pprof.Lookup(p).WriteTo(pf, 0)
			_ = pf.Close()
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
		h, err := os.Create(filepath.Join(dir, name+".heap.pprof"))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = h.Close() }()
		if err := pprof.WriteHeapProfile(h); err != nil {
			b.Fatal(err)
		}
	}
}

// onboardBench: one app of 5 ConfigMaps placed on every cluster labelled
// "fleet".
func onboardBench(b *testing.B, a api) {
	tmpl := ""
	for i := range 5 {
		tmpl += fmt.Sprintf("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-%d\ndata:\n  n: \"%d\"\n", i, i)
	}
	chart := tgz.FromInside(b, map[string]string{"Chart.yaml": "apiVersion: v2\nname: sim\nversion: 0.1.0\n", "values.yaml": "",
		"templates/all.yaml": tmpl})
	profile := tgz.Files(b, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: override_values.yaml\n", "override_values.yaml": ""})
	meta := func(name string) map[string]any { return map[string]any{"metadata": map[string]any{"name": name}} }
	obj := func(name string, spec map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
	}
	a.must(201, "POST", "/v2/projects", meta("fleet"))
	a.must(201, "POST", "/v2/projects/fleet/composite-apps", obj("fleet", map[string]any{"compositeAppVersion": "v1"}))
	a.must(201, "POST", benchCA+"/composite-profiles", meta("fleet-profile"))
	a.upload(benchCA+"/apps", meta("sim"), chart)
	a.upload(benchCA+"/composite-profiles/fleet-profile/profiles", obj("sim-profile", map[string]any{"app": "sim"}), profile)
	a.must(201, "POST", benchCA+"/deployment-intent-groups", obj("fleet-dig", map[string]any{"compositeProfile": "fleet-profile", "version": "r1"}))
	a.must(201, "POST", benchDIG+"/generic-placement-intents", meta("gpi"))
	a.must(201, "POST", benchDIG+"/generic-placement-intents/gpi/app-intents", obj("sim-placement", map[string]any{"app": "sim",
		"intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "fleet", "clusterLabel": "fleet"}}}}))
	a.must(201, "POST", benchDIG+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
}

func applied(a api) int {
	var s struct {
		DeployedCounts map[string]int `json:"deployedCounts"`
	}
	_ = json.Unmarshal(a.must(200, "GET", benchDIG+"/status?type=rsync&output=summary", nil), &s)
	return s.DeployedCounts["Applied"]
}

func ready(a api) int {
	var s struct {
		ReadyCounts map[string]int `json:"readyCounts"`
	}
	_ = json.Unmarshal(a.must(200, "GET", benchDIG+"/status?type=cluster&output=summary", nil), &s)
	return s.ReadyCounts["Ready"]
}

// statusP50 is the median of 21 status queries.
func statusP50(a api, q string) time.Duration {
	var took []time.Duration
	for range 21 {
		start := time.Now()
		a.must(200, "GET", benchDIG+"/status?"+q, nil)
		took = append(took, time.Since(start))
	}
	return percentile(took, 50)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(float64(len(d))*p/100))]
}

// delivery is one resource a callback named as modified.
type delivery struct {
	at    time.Time
	ready string
}

// churn subscribes to the DIG, makes 10,000 changes a minute over the
// fleet for d, and matches every change with the first callback naming
// the resource in its new state.
func churn(b *testing.B, a api, f *Fleet, d time.Duration, output string) (p50, p99 time.Duration, made, lost int) {
	var mu sync.Mutex
	seen := map[string][]delivery{} // by cluster/kind/name
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var doc struct {
			Changes struct {
				Modified []map[string]any `json:"modified"`
			} `json:"resource-changes"`
		}
		_ = json.Unmarshal(body, &doc)
		mu.Lock()
		for _, e := range doc.Changes.Modified {
			k, ready := entryKey(e)
			seen[k] = append(seen[k], delivery{at: at, ready: ready})
		}
		mu.Unlock()
	}))
	defer srv.Close()
	a.must(201, "POST", benchDIG+"/status/subscriptions", map[string]any{"name": "bench", "callback-url": srv.URL, "type": "cluster", "output": output})
	before := len(f.Changes())
	f.SetChurn(10000 / float64(len(f.Clusters())))
	<-time.After(d) // the churn's length, not a synchronisation
	f.SetChurn(0)
	changes := f.Changes()[before:]
	var lat []time.Duration
	var slow map[int]int // changes over 500 ms, by the second of the churn they were made in
	match := func() (int, []time.Duration, map[int]int) {
		mu.Lock()
		defer mu.Unlock()
		missing, lat, slow := 0, lat[:0], map[int]int{}
		for _, c := range changes {
			got, ok := firstDelivery(seen[changeKey(c)], c)
			if !ok {
				missing++
				continue
			}
			lat = append(lat, got.Sub(c.At))
			if got.Sub(c.At) > 500*time.Millisecond {
				slow[int(c.At.Sub(changes[0].At).Seconds())]++
			}
		}
		return missing, lat, slow
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lost, lat, slow = match()
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	if len(changes) > 0 && lost == len(changes) {
		mu.Lock()
		for k := range seen {
			b.Logf("a callback named %s; the first change was %s", k, changeKey(changes[0]))
			break
		}
		mu.Unlock()
	}
	b.Logf("%d changes in %s, %d delivered; p90 %s, p99.9 %s, max %s; over 500 ms by second of the churn: %v", len(changes), d, len(lat),
		percentile(lat, 90).Round(time.Millisecond), percentile(lat, 99.9).Round(time.Millisecond), percentile(lat, 100).Round(time.Millisecond), slow)
	return percentile(lat, 50), percentile(lat, 99), len(changes), lost
}

func firstDelivery(ds []delivery, c Change) (time.Time, bool) {
	want := "Ready"
	if !c.Ready {
		want = "NotReady"
	}
	for _, d := range ds {
		if !d.at.Before(c.At) && (d.ready == "" || d.ready == want) {
			return d.at, true
		}
	}
	return time.Time{}, false
}

// changeKey and entryKey name a resource alike: cluster/Kind/name.
func changeKey(c Change) string {
	parts := strings.SplitN(c.Resource, "/", 3)
	return c.Cluster + "/" + parts[0] + "/" + parts[len(parts)-1]
}

func entryKey(e map[string]any) (string, string) {
	gvk, _ := e["GVK"].(map[string]any)
	kind, _ := gvk["Kind"].(string)
	cluster, _ := e["cluster"].(string)
	name, _ := e["name"].(string)
	ready, _ := e["readyStatus"].(string)
	return cluster + "/" + kind + "/" + name, ready
}

// restart restarts the single replica (or kills the one of several serving
// the most agents, whose agents go to the others) and returns how long
// until every agent is connected again.
func restart(b *testing.B, d *deployment, f *Fleet, n int) time.Duration {
	if len(d.pids) == 1 {
		start := time.Now()
		d.stop()
		poll(b, time.Minute, "every agent disconnected", func() bool { return f.Connected() == 0 })
		d.startProcess()
		poll(b, 5*time.Minute, "every agent connected again", func() bool { return f.Connected() == n })
		return time.Since(start)
	}
	// Agents start at a random one of the URLs: the busiest replica is
	// the worst case, and how many it served is logged beside the time.
	busiest, most := 0, -1.0
	hc := d.client(10 * time.Second)
	for i, u := range d.urls {
		if v := agentsConnected(b, hc, u); v > most {
			busiest, most = i, v
		}
	}
	b.Logf("killing replica %d, serving %.0f of %d agents", busiest+1, most, n)
	start := time.Now()
	if err := syscall.Kill(d.pids[busiest], syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	// Copies: the agents' options share d.urls.
	d.pids = slices.Delete(slices.Clone(d.pids), busiest, busiest+1)
	d.urls = slices.Delete(slices.Clone(d.urls), busiest, busiest+1)
	if len(d.debug) > busiest {
		d.debug = slices.Delete(slices.Clone(d.debug), busiest, busiest+1)
	}
	poll(b, time.Minute, "the agents noticed", func() bool { return f.Connected() < n })
	poll(b, 5*time.Minute, "every agent connected again", func() bool { return f.Connected() == n })
	return time.Since(start)
}

// agentsConnected reads a replica's argus_fleet_agents_connected.
func agentsConnected(b *testing.B, hc *http.Client, base string) float64 {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		b.Fatal(err)
	}
	v, ok := testenv.Metric(string(body), "argus_fleet_agents_connected")
	if !ok {
		b.Fatalf("%s/metrics has no argus_fleet_agents_connected", base)
	}
	return v
}

// formatWrites lists writes by prefix, most transactions first.
func formatWrites(by map[string]testenv.Writes) string {
	prefixes := make([]string, 0, len(by))
	for p := range by {
		prefixes = append(prefixes, p)
	}
	sort.Slice(prefixes, func(i, j int) bool { return by[prefixes[i]].Txns > by[prefixes[j]].Txns })
	var b strings.Builder
	for _, p := range prefixes {
		w := by[p]
		fmt.Fprintf(&b, "%s txns=%d keys=%d bytes=%d; ", p, w.Txns, w.Keys, w.Bytes)
	}
	return strings.TrimSuffix(b.String(), "; ") // one line: a benchmark's log is cut after a few
}

// agentLog writes the simulated agents' warnings to file.
func agentLog(tb testing.TB, file string) *logrus.Entry {
	out, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = out.Close() })
	log := logrus.New()
	log.SetOutput(out)
	log.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(log)
}

// waitConnected waits until every agent of f has a stream, and fails at
// once when one stopped (it never will).
func waitConnected(b *testing.B, f *Fleet, n int) time.Duration {
	return pollCount(b, 5*time.Minute+time.Duration(n)*30*time.Millisecond, "every agent connected", n, func() int {
		if errs := f.Errors(); len(errs) > 0 {
			b.Fatalf("%d agents stopped, the first: %v", len(errs), errs[0])
		}
		return f.Connected()
	})
}
