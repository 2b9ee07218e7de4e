package render

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// limitAddressSpace caps a started worker's address space at what it maps
// now plus limit (Go reserves a large, mostly unused range at start, so an
// absolute cap would either stop every worker or bound nothing). The
// race detector maps terabytes of shadow memory, so its builds rely on the
// worker's own heap watchdog alone.
func limitAddressSpace(pid int, limit int64) error {
	if raceEnabled {
		return nil
	}
	base, err := vmSize(pid)
	if err != nil {
		return err
	}
	lim := uint64(base + limit)
	return unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: lim, Max: lim}, nil)
}

// vmSize reads a process's mapped address space in bytes.
func vmSize(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmSize %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmSize in /proc/%d/status", pid)
}

// preferOOMKill makes this worker the kernel's first choice when memory
// runs out (its pod's or the machine's), before the orchestrator. Raising
// one's own score needs no privilege.
func preferOOMKill() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}
