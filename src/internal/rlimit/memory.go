package rlimit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/sirupsen/logrus"
)

// DefaultMemoryRatio is MemoryOptions.Ratio's usual value: the share of
// its container's memory Prometheus and most Go servers give the runtime,
// leaving the rest for what it overshoots.
const DefaultMemoryRatio = 0.9

// MemoryOptions configures SetMemoryLimit.
type MemoryOptions struct {
	// Ratio is the share of the container's memory limit, less Reserve,
	// the Go runtime keeps its memory under (GOMEMLIMIT); 0 leaves the
	// runtime's default (no limit).
	Ratio float64
	// Reserve is memory of the container the process does not use
	// itself: its child processes' (render workers).
	Reserve uint64
	// Limit reads the container's memory limit; nil reads the process's
	// cgroup (v1 or v2, the lowest limit on its path).
	Limit func() (uint64, error)
	// Logger says what was set; nil says nothing.
	Logger *logrus.Entry
}

// SetMemoryLimit sets the Go runtime's soft memory limit from the
// container's: as the heap nears it the garbage collector works harder,
// where otherwise the heap's goal (twice what is live, after a burst) can
// pass the container's limit and the kernel kill the process. It returns
// the limit in force afterwards. It sets none, and says why in its error,
// when the container's limit leaves the process less than a quarter of
// it beside Reserve: a limit that small would keep the collector running.
// GOMEMLIMIT in the environment (read by the runtime at start) wins; a
// process outside a memory cgroup, or in one without a limit, keeps the
// runtime's default, and that is no error.
func SetMemoryLimit(o MemoryOptions) (int64, error) {
	current := debug.SetMemoryLimit(-1)
	if !(o.Ratio >= 0 && o.Ratio <= 1) {
		return current, fmt.Errorf("memory limit ratio %v: want 0 (off) or a share up to 1", o.Ratio)
	}
	if o.Ratio == 0 {
		return current, nil
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" { // the process's own environment, which the runtime read
		if o.Logger != nil {
			o.Logger.WithField("GOMEMLIMIT", v).Info("Go memory limit set by GOMEMLIMIT, not from the container's")
		}
		return current, nil
	}
	if o.Limit == nil {
		o.Limit = memlimit.FromCgroup
	}
	l, err := o.Limit()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrNoCgroup), errors.Is(err, memlimit.ErrCgroupsNotSupported):
		return current, nil
	case err != nil:
		return current, fmt.Errorf("read the container's memory limit: %w", err)
	case l <= o.Reserve || l-o.Reserve < l/4:
		return current, fmt.Errorf("the container's memory limit (%d MiB) leaves less than a quarter of it beside the %d MiB its child processes may use: raise the limit", l>>20, o.Reserve>>20)
	}
	limit := int64(math.MaxInt64) // a limit past what int64 holds is none
	if f := float64(l-o.Reserve) * o.Ratio; f < math.MaxInt64 {
		limit = int64(f)
	}
	debug.SetMemoryLimit(limit)
	if o.Logger != nil {
		o.Logger.WithFields(logrus.Fields{"container_limit": l, "reserve": o.Reserve, "gomemlimit": limit}).Info("Go memory limit set from the container's")
	}
	return limit, nil
}

// DefaultGCPercent is the collection target the orchestrator runs at
// unless GOGC is set. At fleet size a replica's heap is mostly long-lived
// caches, so at the runtime's 100 the garbage grows as large as they are
// before each collection; with the agents' streams framed, an idle
// replica makes little garbage, and 50 took 35 KiB a cluster off its
// memory for no idle CPU that the benchmark could see (docs/benchmarks.md,
// "One goroutine a stream"). Prometheus, for a like heap, defaults to 75.
const DefaultGCPercent = 50

// SetGCPercent sets the collector's target to percent unless the
// environment (getenv) sets GOGC, which an operator's choice keeps; it
// reports whether it set it.
func SetGCPercent(getenv func(string) string, percent int) bool {
	if getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(percent)
	return true
}
