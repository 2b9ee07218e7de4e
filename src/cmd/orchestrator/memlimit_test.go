package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// An orchestrator in a container limited to 1,536 MiB keeps its memory
// under 0.9 × (1,536 − 512 for a rendering worker − 2 × 64 for the
// workers' start-up) MiB: the process runs in a memory cgroup of its own,
// made for the test (skipped where none can be made: not root, no cgroup
// file system), or under the lower limit of a cgroup above it.
func TestMemoryLimitFromTheCgroup(t *testing.T) {
	const limit = 1536 << 20
	cg := memoryCgroup(t, limit)
	data := t.TempDir()
	// The shell joins the cgroup, then becomes the orchestrator: it reads
	// its limit in the cgroup from its first instruction.
	cmd := exec.Command("sh", "-c", `echo $$ > "$CGROUP_PROCS" && exec "$0" "$@"`, os.Args[0],
		"--listen", "127.0.0.1:0", "--data-dir", data, "--log-level", "info")
	cmd.Env = append(os.Environ(), "ARGUS_TEST_RUN_MAIN=1", "CGROUP_PROCS="+cg.procs)
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "AUTOMEMLIMIT=") // the operator's, which win
	})
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	set := make(chan int64, 1)
	var lines []string
	p, err := testenv.StartProc(cmd, func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			var e struct {
				Msg        string
				GOMEMLIMIT int64 `json:"gomemlimit"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "Go memory limit set from the container's" {
				select {
				case set <- e.GOMEMLIMIT:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // past a line too long for the scanner
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(30 * time.Second)
	want := int64(float64(cg.effective-renderReserve(orchestrator.RenderOptions{})) * 0.9)
	select {
	case got := <-set:
		if got != want {
			t.Errorf("GOMEMLIMIT %d MiB, want %d MiB", got>>20, want>>20)
		}
	case <-p.Done():
		t.Fatalf("the orchestrator exited: %s", strings.Join(lines, "\n"))
	case <-time.After(60 * time.Second):
		p.Stop(30 * time.Second)
		t.Fatalf("no GOMEMLIMIT set within 60s: %s", strings.Join(lines, "\n"))
	}
}

type cgroup struct {
	procs string
	// effective is the lowest limit on the cgroup's path.
	effective uint64
}

// memoryCgroup makes a memory cgroup (v1, or v2 with the memory
// controller) below the test's own, limited to limit bytes, and removes
// it after the test; the test is skipped where none can be made.
func memoryCgroup(t *testing.T, limit int64) cgroup {
	t.Helper()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	var dir, limitFile string
	for l := range strings.Lines(string(own)) {
		parts := strings.SplitN(strings.TrimSpace(l), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(c), "memory") {
				dir, limitFile = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max"
			}
		}
	}
	if dir == "" {
		t.Skip("no memory cgroup controller")
	}
	dir = filepath.Join(dir, fmt.Sprintf("argus-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Removed once empty: the test's process has exited by then.
		deadline := time.Now().Add(30 * time.Second)
		for err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist); err = os.Remove(dir) {
			if time.Now().After(deadline) {
				t.Errorf("cgroup %s not removed: %v", dir, err)
				return
			}
			time.Sleep(50 * time.Millisecond) // polling with a deadline
		}
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Skipf("cannot limit a memory cgroup: %v", err)
	}
	effective := uint64(limit)
	if limitFile == "memory.limit_in_bytes" { // v1 says what holds below its ancestors
		stat, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
		for l := range strings.Lines(string(stat)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "hierarchical_memory_limit "); ok {
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					effective = min(effective, n)
				}
			}
		}
	} else { // v2: the lowest memory.max up to the root
		for d := filepath.Dir(dir); strings.HasPrefix(d, "/sys/fs/cgroup/"); d = filepath.Dir(d) {
			v, _ := os.ReadFile(filepath.Join(d, "memory.max"))
			if n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64); err == nil {
				effective = min(effective, n)
			}
		}
	}
	if reserve := renderReserve(orchestrator.RenderOptions{}); effective-reserve < effective/4 || effective <= reserve {
		t.Skipf("the cgroup's effective limit, %d MiB, leaves no room beside the render workers", effective>>20)
	}
	return cgroup{procs: filepath.Join(dir, "cgroup.procs"), effective: effective}
}

func TestRenderReserve(t *testing.T) {
	for _, tc := range []struct {
		ro   orchestrator.RenderOptions
		want uint64
	}{
		{orchestrator.RenderOptions{}, 512<<20 + 2*idleRenderWorker},
		{orchestrator.RenderOptions{Workers: 4, MemoryLimit: 1 << 30}, 1<<30 + 4*idleRenderWorker},
		{orchestrator.RenderOptions{Workers: -1, MemoryLimit: -1}, 512<<20 + 2*idleRenderWorker},
	} {
		if got := renderReserve(tc.ro); got != tc.want {
			t.Errorf("renderReserve(%+v) = %d MiB, want %d MiB", tc.ro, got>>20, tc.want>>20)
		}
	}
}
