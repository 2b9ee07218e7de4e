package rlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// DefaultMemoryRatio is MemoryOptions.Ratio's usual value: the share of
// its container's memory Prometheus and most Go servers give the heap,
// leaving the rest for the runtime's own overshoot.
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
	// cgroup (v1 or v2).
	Limit func() (uint64, error)
	// Logger says what was set; nil says nothing.
	Logger *slog.Logger
}

// SetMemoryLimit sets the Go runtime's soft memory limit from the
// container's: as the heap nears it the garbage collector works harder,
// where otherwise the heap's goal (twice what is live after a burst) can
// pass the container's limit and the kernel kills the process. GOMEMLIMIT
// in the environment wins, as does AUTOMEMLIMIT (a ratio, or "off"). It
// returns the limit in force (math.MaxInt64: none); a process outside any
// memory cgroup, or in one without a limit, keeps none and is no error.
func SetMemoryLimit(o MemoryOptions) (int64, error) {
	if o.Ratio == 0 {
		return math.MaxInt64, nil
	}
	if o.Ratio < 0 || o.Ratio > 1 {
		return 0, fmt.Errorf("memory limit ratio %v: want 0 (off) or a share in (0, 1]", o.Ratio)
	}
	if o.Limit == nil {
		o.Limit = memlimit.FromCgroup
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	provider := func() (uint64, error) {
		l, err := o.Limit()
		if err != nil {
			return 0, err
		}
		if l <= o.Reserve {
			return 0, fmt.Errorf("the container's memory limit (%d MiB) leaves nothing beside the %d MiB reserved for child processes", l>>20, o.Reserve>>20)
		}
		return l - o.Reserve, nil
	}
	limit, err := memlimit.Set(memlimit.WithProvider(provider), memlimit.WithRatio(o.Ratio), memlimit.WithLogger(o.Logger))
	if errors.Is(err, memlimit.ErrNoCgroup) {
		return limit, nil
	}
	return limit, err
}
