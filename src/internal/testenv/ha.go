package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// HAOptions configures StartHA.
type HAOptions struct {
	// Orchestrator is the binary the replicas run; "" builds
	// src/cmd/orchestrator (BuildOrchestrator).
	Orchestrator string
	// Replicas is how many orchestrators the script starts; 0 means 3.
	Replicas int
	// Dir is the script's --dir (its stores, logs, ready and replicas
	// files); "" means a temporary directory of the test's.
	Dir string
	// Flags are the orchestrators' own flags.
	Flags []string
}

// HA is scripts/ha-up.sh run by a test or a benchmark: a three-member
// etcd, a standalone FerretDB and the orchestrator replicas, all in the
// script's own process group, which is told to stop if the test process
// dies (a killed benchmark leaves no store running) and must be empty
// once Stop returns.
type HA struct {
	// Dir is the script's directory; Replicas what its replicas file
	// lists, in order.
	Dir      string
	Replicas []HAReplica

	tb   testing.TB
	proc *Proc
	once sync.Once
}

// HAReplica is one orchestrator replica ha-up.sh started.
type HAReplica struct {
	URL string
	PID int
	// Debug is where it serves its profiles (ARGUS_HA_DEBUG=1), or "".
	Debug string
}

// StartHA runs scripts/ha-up.sh and returns once it says it is ready
// (DIR/ready); it is stopped when the test ends, or earlier by Stop. The
// script writes its output to DIR/ha-up.log (Output), not to a pipe: a
// test process that died would leave it a pipe without a reader, and the
// script, stopping on its death signal, would die of SIGPIPE at its next
// line of output with the stores still running.
func StartHA(tb testing.TB, opts HAOptions) *HA {
	tb.Helper()
	if opts.Orchestrator == "" {
		opts.Orchestrator = BuildOrchestrator(tb, tb.TempDir())
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	h := &HA{Dir: opts.Dir, tb: tb}
	log, err := os.Create(filepath.Join(opts.Dir, "ha-up.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = log.Close() }() // the script has its own descriptor
	args := append([]string{"--replicas", strconv.Itoa(opts.Replicas), "--dir", opts.Dir, "--"}, opts.Flags...)
	cmd := exec.Command(filepath.Join(repoRoot(tb), "scripts", "ha-up.sh"), args...)
	cmd.Env = append(os.Environ(), "ARGUS_ORCHESTRATOR="+opts.Orchestrator)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so nothing it started can outlive the test;
	// told to stop if the test process dies (SIGTERM, so the script stops
	// what it started).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if h.proc, err = StartProc(cmd, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Stop)
	start := time.Now()
	for {
		if _, err := os.Stat(filepath.Join(opts.Dir, "ready")); err == nil {
			break
		}
		select {
		case <-h.proc.Done():
			tb.Fatalf("ha-up.sh exited before ready: %s", h.Output())
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
		if time.Since(start) > 5*time.Minute {
			tb.Fatalf("ha-up.sh not ready after 5 minutes: %s", h.Output())
		}
	}
	tb.Logf("ha-up.sh: %d replicas ready in %s", opts.Replicas, time.Since(start).Round(100*time.Millisecond))
	h.Replicas = readReplicas(tb, filepath.Join(opts.Dir, "replicas"))
	if len(h.Replicas) != opts.Replicas {
		tb.Fatalf("%d replicas listed, want %d", len(h.Replicas), opts.Replicas)
	}
	return h
}

// readReplicas reads ha-up.sh's replicas file: "URL PID [DEBUG]" a line.
func readReplicas(tb testing.TB, path string) []HAReplica {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []HAReplica
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || len(f) > 3 {
			tb.Fatalf("replicas line %q", sc.Text())
		}
		p, err := strconv.Atoi(f[1])
		if err != nil {
			tb.Fatalf("replicas line %q", sc.Text())
		}
		r := HAReplica{URL: f[0], PID: p}
		if len(f) == 3 {
			r.Debug = f[2]
		}
		out = append(out, r)
	}
	return out
}

// HAStore is one store process ha-up.sh started.
type HAStore struct {
	URL string
	PID int
}

// ReadHAStores reads ha-up.sh's stores file ("NAME URL PID" a line: the
// etcd members e1..e3 and ferretdb), for tests that fail or profile them.
func ReadHAStores(path string) (map[string]HAStore, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]HAStore{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("stores line %q", line)
		}
		pid, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("stores line %q", line)
		}
		out[f[0]] = HAStore{URL: f[1], PID: pid}
	}
	return out, nil
}

// Stores are the stores the script started, by name (DIR/stores).
func (h *HA) Stores() map[string]HAStore {
	out, err := ReadHAStores(filepath.Join(h.Dir, "stores"))
	if err != nil {
		h.tb.Fatal(err)
	}
	return out
}

// Output is what the script printed so far.
func (h *HA) Output() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "ha-up.log"))
	return string(b)
}

// lastErrors is each replica's last n log lines at error level or above,
// and the first line of a Go crash.
func (h *HA) lastErrors(n int) string {
	var b strings.Builder
	for i := range h.Replicas {
		data, _ := os.ReadFile(filepath.Join(h.Dir, "logs", fmt.Sprintf("orch%d.log", i+1)))
		var lines []string
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"panic"`) ||
				strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
				lines = append(lines, l)
			}
		}
		fmt.Fprintf(&b, "r%d: %s", i+1, strings.Join(lines[max(0, len(lines)-n):], ""))
		if len(lines) == 0 {
			b.WriteString("none\n")
		}
	}
	return b.String()
}

// Exited is closed once the script has ended.
func (h *HA) Exited() <-chan struct{} { return h.proc.Done() }

// Stop sends the script SIGTERM and waits for it to stop everything; its
// process group is killed if it does not within two minutes (replicas
// handing over thousands of clusters take a while). Nothing of the group
// may be left after: a survivor is a test error. Calling it again does
// nothing.
func (h *HA) Stop() {
	h.once.Do(h.stop)
}

func (h *HA) stop() {
	if h.tb.Failed() { // the replicas' logs go with the test's directory
		h.tb.Logf("the replicas' last errors:\n%s", h.lastErrors(10))
	}
	pgid := h.proc.Cmd.Process.Pid
	if h.proc.Stop(2 * time.Minute) {
		h.tb.Errorf("ha-up.sh ignored SIGTERM for two minutes (its group was killed): %s", h.Output())
	}
	// A replica's render workers end on their parent's death signal
	// (Pdeathsig), just after it: they are given a few seconds to go
	// before they count as survivors.
	err := syscall.Kill(-pgid, 0)
	for deadline := time.Now().Add(10 * time.Second); !errors.Is(err, syscall.ESRCH) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // polling with a deadline
		err = syscall.Kill(-pgid, 0)
	}
	if !errors.Is(err, syscall.ESRCH) {
		h.tb.Errorf("processes of ha-up.sh's group survive it (kill -0: %v); killing them", err)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// BuildOrchestrator builds src/cmd/orchestrator into dir and returns the
// binary (the Go build cache makes every build after the first a link).
func BuildOrchestrator(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "orchestrator")
	cmd := exec.Command("go", "build", "-o", bin, "./src/cmd/orchestrator")
	cmd.Dir = repoRoot(tb)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build orchestrator: %v: %s", err, out)
	}
	return bin
}

// repoRoot is the module's root: the nearest directory above the test's
// working directory (its package) with a go.mod.
func repoRoot(tb testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}
