package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// An orchestrator in a container limited to 1,536 MiB keeps its heap under
// 0.9 × (1,536 − 512 for a rendering worker − 64 for the idle one) MiB:
// the process runs in a memory cgroup of its own, made for the test (it
// is skipped where none can be made: not root, no cgroup file system).
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
				GOMEMLIMIT int64
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "GOMEMLIMIT is updated" {
				select {
				case set <- e.GOMEMLIMIT:
				default:
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(30 * time.Second)
	want := int64(float64(limit-512<<20-idleRenderWorker) * 0.9)
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

type cgroup struct{ procs string }

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
	return cgroup{procs: filepath.Join(dir, "cgroup.procs")}
}
