package fleetsim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// deployment is the orchestrator under benchmark: one process on
// embedded stores, or scripts/ha-up.sh's replicas on standalone stores.
type deployment struct {
	tb       testing.TB
	bin, dir string
	port     int
	urls     []string
	pids     []int
	proc     *testenv.Proc
	done     chan error
	// ha is scripts/ha-up.sh's deployment (nil for one process).
	ha *testenv.HA
	// inProcess runs the orchestrator in this process (for profiles:
	// ARGUS_FLEET_PROFILE); cancel stops it.
	inProcess bool
	cancel    context.CancelFunc
	// debug is where each replica serves its profiles (--debug-listen)
	// when ARGUS_FLEET_HEAP names a directory for them; empty otherwise.
	debug []string
	// tls is the test CA the replicas serve HTTPS with (ARGUS_FLEET_TLS=1,
	// as production agents reach them: on the native transport); nil
	// serves plain http.
	tls *benchTLS
}

// benchTLS is a throwaway certificate for 127.0.0.1, its own CA.
type benchTLS struct {
	certFile, keyFile, caFile string
	roots                     *x509.CertPool
}

// newBenchTLS writes a test certificate into dir when ARGUS_FLEET_TLS=1.
func newBenchTLS(tb testing.TB, dir string) *benchTLS {
	if os.Getenv("ARGUS_FLEET_TLS") != "1" {
		return nil
	}
	pair := testcert.New(tb, "argus-fleet-bench")
	t := &benchTLS{caFile: filepath.Join(dir, "ca.crt"), roots: pair.Pool()}
	t.certFile, t.keyFile = pair.Write(tb, dir)
	testcert.WriteFile(tb, t.caFile, pair.CertPEM)
	return t
}

// flags are the orchestrator's flags for d: orchestratorFlags, and the
// certificate with TLS.
func (d *deployment) flags() []string {
	if d.tls == nil {
		return orchestratorFlags
	}
	return append(slices.Clone(orchestratorFlags), "--tls-cert-file", d.tls.certFile, "--tls-key-file", d.tls.keyFile)
}

// scheme is the replicas' URL scheme.
func (d *deployment) scheme() string {
	if d.tls == nil {
		return "http"
	}
	return "https"
}

// roots verify the replicas' certificate; nil without TLS.
func (d *deployment) roots() *x509.CertPool {
	if d.tls == nil {
		return nil
	}
	return d.tls.roots
}

// client is an HTTP client of the replicas' API.
func (d *deployment) client(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: d.roots()}
	return &http.Client{Timeout: timeout, Transport: tr}
}

// orchestratorFlags: every agent holds a connection of the API's port, so
// the connection cap (automatic: at most 4,096) is raised above the
// largest fleet benchmarked; 5,000 agents stalled at the automatic cap.
var orchestratorFlags = []string{"--callback-allow", "127.0.0.1", "--log-format", "text", "--log-level", "warn", "--max-connections", "12000"}

// startSingle runs one orchestrator on embedded stores under dir.
func startSingle(tb testing.TB, bin, dir string) *deployment {
	d := &deployment{tb: tb, bin: bin, dir: dir, port: freePort(tb), inProcess: os.Getenv("ARGUS_FLEET_PROFILE") != ""}
	d.tls = newBenchTLS(tb, dir)
	if os.Getenv("ARGUS_FLEET_HEAP") != "" && !d.inProcess {
		d.debug = []string{fmt.Sprintf("127.0.0.1:%d", freePort(tb))}
	}
	d.startProcess()
	return d
}

func (d *deployment) startProcess() {
	if d.inProcess {
		d.startInProcess()
		return
	}
	logDir := d.dir
	if dir := os.Getenv("ARGUS_FLEET_HEAP"); dir != "" {
		logDir = dir // kept after the benchmark, with the profiles
	}
	log, err := os.OpenFile(filepath.Join(logDir, "orchestrator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.tb.Fatal(err)
	}
	args := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", d.port), "--data-dir", filepath.Join(d.dir, "data")}, d.flags()...)
	if len(d.debug) > 0 {
		args = append(args, "--debug-listen", d.debug[0])
	}
	cmd := exec.Command(d.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Ended by the kernel if the benchmark's process dies.
	d.proc, err = testenv.StartProc(cmd, nil)
	_ = log.Close() // the orchestrator has its own descriptor
	if err != nil {
		d.tb.Fatal(err)
	}
	d.done = make(chan error, 1)
	go func(p *testenv.Proc) { d.done <- p.Err() }(d.proc)
	d.urls = []string{fmt.Sprintf("%s://127.0.0.1:%d", d.scheme(), d.port)}
	d.pids = []int{cmd.Process.Pid}
	waitReady(d.tb, d.client(10*time.Second), d.urls[0], d.done)
}

// startHA runs scripts/ha-up.sh with n replicas of bin (testenv.HA: its
// own process group, stopped if the benchmark's process dies).
func startHA(tb testing.TB, bin, dir string, n int) *deployment {
	d := &deployment{tb: tb, bin: bin, dir: dir, tls: newBenchTLS(tb, dir)}
	if os.Getenv("ARGUS_FLEET_HEAP") != "" {
		tb.Setenv("ARGUS_HA_DEBUG", "1") // each replica serves its profiles
	}
	if d.tls != nil {
		tb.Setenv("ARGUS_HA_TLS_CA", d.tls.caFile) // ha-up.sh's readiness checks and URLs
	}
	d.ha = testenv.StartHA(tb, testenv.HAOptions{Orchestrator: bin, Replicas: n, Dir: dir, Flags: d.flags()})
	for _, r := range d.ha.Replicas {
		d.urls, d.pids = append(d.urls, r.URL), append(d.pids, r.PID)
		if r.Debug != "" {
			d.debug = append(d.debug, r.Debug)
		}
	}
	return d
}

// startInProcess runs the orchestrator in this process, on embedded
// stores under d.dir, on d.port.
func (d *deployment) startInProcess() {
	logFile, err := os.OpenFile(filepath.Join(os.Getenv("ARGUS_FLEET_PROFILE"), "orchestrator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.tb.Fatal(err)
	}
	d.tb.Cleanup(func() { _ = logFile.Close() })
	log, err := logging.New(logFile, "text", "warn")
	if err != nil {
		d.tb.Fatal(err)
	}
	opts := orchestrator.Options{Listen: fmt.Sprintf("127.0.0.1:%d", d.port), DataDir: filepath.Join(d.dir, "data"),
		CallbackAllow: []string{"127.0.0.1"}, Logger: log}
	if d.tls != nil {
		opts.TLSCertFile, opts.TLSKeyFile = d.tls.certFile, d.tls.keyFile
	}
	app, err := orchestrator.New(opts)
	if err != nil {
		d.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan error, 1)
	go func() { d.done <- app.Run(ctx) }()
	select {
	case <-app.Ready():
	case err := <-d.done:
		d.tb.Fatalf("orchestrator stopped: %v", err)
	}
	d.urls, d.pids = []string{fmt.Sprintf("%s://127.0.0.1:%d", d.scheme(), d.port)}, []int{os.Getpid()}
	d.proc = nil
}

// freePort is a loopback port free at the time of asking.
func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// saveHeap writes each replica's heap profile (after a GC), its runtime
// statistics and goroutines, and its /proc status to
// ARGUS_FLEET_HEAP/<name>[-rN].*, when it serves its profiles.
func (d *deployment) saveHeap(name string) {
	dir := os.Getenv("ARGUS_FLEET_HEAP")
	for i, addr := range d.debug {
		base := d.profileName(name, i)
		// In this order: the statistics are read after the profile's
		// collection, so their HeapAlloc is what is live.
		for _, f := range []struct{ file, path string }{
			{base + ".heap.pprof", "heap?gc=1"},
			{base + ".memstats.txt", "heap?debug=1"},
			{base + ".goroutines.txt", "goroutine?debug=1"},
		} {
			if err := fetchTo(fmt.Sprintf("http://%s/debug/pprof/%s", addr, f.path), filepath.Join(dir, f.file), fetchTimeout); err != nil {
				d.tb.Logf("profile %s: %v", f.file, err)
			}
		}
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pids[i])); err == nil {
			_ = os.WriteFile(filepath.Join(dir, base+".status.txt"), data, 0o644)
		}
	}
}

// profileName is name for one replica, name-rN for each of several.
func (d *deployment) profileName(name string, i int) string {
	if len(d.debug) == 1 {
		return name
	}
	return fmt.Sprintf("%s-r%d", name, i+1)
}

// saveCPU writes a CPU profile of each replica over the next dur to
// ARGUS_FLEET_HEAP/<name>[-rN].cpu.pprof, when it serves its profiles;
// the channel closes once they are written.
func (d *deployment) saveCPU(name string, dur time.Duration) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	urls := map[string]string{}
	for i, addr := range d.debug {
		urls[d.profileName(name, i)] = "http://" + addr
	}
	for member, url := range d.etcdDebug() { // and etcd's members (--enable-pprof)
		urls[name+"-"+member] = url
	}
	for base, addr := range urls {
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", addr, int(dur.Seconds()))
		file := filepath.Join(os.Getenv("ARGUS_FLEET_HEAP"), base+".cpu.pprof")
		wg.Go(func() {
			if err := fetchTo(url, file, dur+fetchTimeout); err != nil {
				d.tb.Logf("CPU profile: %v", err)
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// saveMetrics writes each etcd member's metrics to
// ARGUS_FLEET_HEAP/<name>-eN.metrics.txt, when they serve their profiles:
// its disk's fsync and commit histograms say whether a stall was etcd's.
func (d *deployment) saveMetrics(name string) {
	for member, url := range d.etcdDebug() {
		if err := fetchTo(url+"/metrics", filepath.Join(os.Getenv("ARGUS_FLEET_HEAP"), name+"-"+member+".metrics.txt"), fetchTimeout); err != nil {
			d.tb.Logf("metrics: %v", err)
		}
	}
}

// etcdDebug is each etcd member's URL by name, when the replicas serve
// their profiles (ha-up.sh then runs etcd with --enable-pprof).
func (d *deployment) etcdDebug() map[string]string {
	out := map[string]string{}
	if len(d.debug) == 0 || d.ha == nil {
		return out
	}
	for member, st := range d.ha.Stores() {
		if strings.HasPrefix(st.URL, "http://") {
			out[member] = st.URL
		}
	}
	return out
}

// fetchTimeout bounds a profile's or metrics' fetch beyond what it was
// asked to take: a replica that stopped answering must not hold the
// benchmark up.
const fetchTimeout = 30 * time.Second

func fetchTo(url, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(f, resp.Body)
	return err
}

// stop ends the deployment (SIGTERM) and waits for it.
func (d *deployment) stop() {
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
		if err := <-d.done; err != nil {
			d.tb.Errorf("orchestrator: %v", err)
		}
		return
	}
	if d.ha != nil {
		d.ha.Stop()
		d.ha = nil
		return
	}
	if d.proc == nil {
		return
	}
	if d.proc.Stop(2 * time.Minute) {
		d.tb.Errorf("the orchestrator ignored SIGTERM for two minutes")
	}
	d.proc = nil
}

// usage is the replicas' resident memory (KiB) and CPU time (ms) so far.
func (d *deployment) usage() (rssKiB, cpuMs int64) {
	for _, pid := range d.pids {
		r, c := procUsage(d.tb, pid)
		rssKiB += r
		cpuMs += c
	}
	return rssKiB, cpuMs
}

// procUsage reads VmRSS and utime+stime of a process from /proc.
func procUsage(tb testing.TB, pid int) (rssKiB, cpuMs int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command (which may hold spaces): utime and stime
	// are the 14th and 15th, in clock ticks (100 a second on Linux).
	rest := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	ut, _ := strconv.ParseInt(rest[11], 10, 64)
	st, _ := strconv.ParseInt(rest[12], 10, 64)
	return rssKiB, (ut + st) * 10
}

func waitReady(tb testing.TB, hc *http.Client, base string, done chan error) {
	poll(tb, 3*time.Minute, base+" ready", func() bool {
		select {
		case err := <-done:
			done <- err
			tb.Fatalf("orchestrator ended: %v", err)
		default:
		}
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// poll calls cond every 50 ms until it holds, failing after d.
func poll(tb testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			tb.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	return time.Since(start)
}

// pollCount is poll for count() == want, telling the progress every 30 s
// (at fleet size a stall is otherwise silent until the deadline).
func pollCount(tb testing.TB, d time.Duration, what string, want int, count func() int) time.Duration {
	tb.Helper()
	told := time.Now()
	return poll(tb, d, what, func() bool {
		n := count()
		if time.Since(told) > 30*time.Second {
			tb.Logf("%s: %d of %d", what, n, want)
			told = time.Now()
		}
		return n == want
	})
}

// api calls the orchestrator's REST API.
type api struct {
	tb   testing.TB
	base string
	hc   *http.Client
}

func (a api) do(method, path string, body any) (int, []byte) {
	var r io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		r = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, a.base+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (a api) must(code int, method, path string, body any) []byte {
	a.tb.Helper()
	got, data := a.do(method, path, body)
	if got != code {
		a.tb.Fatalf("%s %s: %d, want %d: %.300s", method, path, got, code, data)
	}
	return data
}

func (a api) upload(path string, meta any, file []byte) {
	a.tb.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mj, _ := json.Marshal(meta)
	_ = mw.WriteField("metadata", string(mj))
	fw, _ := mw.CreateFormFile("file", "file.tgz")
	_, _ = fw.Write(file)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", a.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := a.hc.Do(req)
	if err != nil {
		a.tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 201 {
		data, _ := io.ReadAll(resp.Body)
		a.tb.Fatalf("upload %s: %d %s", path, resp.StatusCode, data)
	}
}
