package rlimit

import (
	"errors"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Each case sets the process's memory limit: the previous one is put back.
func TestSetMemoryLimit(t *testing.T) {
	unsetenv(t, "GOMEMLIMIT")
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	limit := func(l uint64, err error) func() (uint64, error) { return func() (uint64, error) { return l, err } }
	for _, tc := range []struct {
		name    string
		opts    MemoryOptions
		want    int64 // in force after; -1: unchanged
		wantErr bool
	}{
		{"the container's limit less the reserve, times the ratio", MemoryOptions{Ratio: 0.9, Reserve: 576 << 20, Limit: limit(1<<30, nil)}, (1024 - 576) << 20 * 9 / 10, false},
		{"no reserve", MemoryOptions{Ratio: 0.5, Limit: limit(1<<30, nil)}, 512 << 20, false},
		{"a limit past 2^63", MemoryOptions{Ratio: 1, Limit: limit(math.MaxUint64, nil)}, math.MaxInt64, false},
		{"no limit in the cgroup", MemoryOptions{Ratio: 0.9, Limit: limit(0, memlimit.ErrNoLimit)}, -1, false},
		{"not in a memory cgroup", MemoryOptions{Ratio: 0.9, Limit: limit(0, memlimit.ErrNoCgroup)}, -1, false},
		{"no cgroups on this system", MemoryOptions{Ratio: 0.9, Limit: limit(0, memlimit.ErrCgroupsNotSupported)}, -1, false},
		{"off", MemoryOptions{Ratio: 0, Limit: limit(1<<30, nil)}, -1, false},
		{"the reserve takes it all", MemoryOptions{Ratio: 0.9, Reserve: 1 << 30, Limit: limit(1<<30, nil)}, -1, true},
		{"less than a quarter beside the reserve", MemoryOptions{Ratio: 0.9, Reserve: 800 << 20, Limit: limit(1<<30, nil)}, -1, true},
		{"a ratio over one", MemoryOptions{Ratio: 1.5, Limit: limit(1<<30, nil)}, -1, true},
		{"no ratio at all", MemoryOptions{Ratio: math.NaN(), Limit: limit(1<<30, nil)}, -1, true},
		{"an unreadable cgroup", MemoryOptions{Ratio: 0.9, Limit: limit(0, errors.New("permission denied"))}, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const marker = 3 << 40
			debug.SetMemoryLimit(marker)
			returned, err := SetMemoryLimit(tc.opts)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			want := tc.want
			if want == -1 {
				want = marker
			}
			if got := debug.SetMemoryLimit(-1); got != want || returned != want {
				t.Errorf("limit in force %d, returned %d, want %d", got, returned, want)
			}
		})
	}
}

// GOMEMLIMIT set by the operator wins over the container's limit.
func TestSetMemoryLimitKeepsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "300MiB")
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	called := false
	if _, err := SetMemoryLimit(MemoryOptions{Ratio: 0.9, Limit: func() (uint64, error) { called = true; return 1 << 30, nil }}); err != nil {
		t.Fatal(err)
	}
	if called || debug.SetMemoryLimit(-1) != before {
		t.Errorf("the container's limit was read (%v) or the limit changed", called)
	}
}

// unsetenv removes key for the test (t.Setenv first, so that it is put
// back after).
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "")
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

// The collector runs at the default target unless GOGC chose one.
func TestSetGCPercentUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	if !SetGCPercent(func(string) string { return "" }, DefaultGCPercent) {
		t.Fatal("not set without GOGC")
	}
	if got := debug.SetGCPercent(100); got != DefaultGCPercent {
		t.Fatalf("target %d, want %d", got, DefaultGCPercent)
	}
	if SetGCPercent(func(k string) string { return map[string]string{"GOGC": "200"}[k] }, DefaultGCPercent) {
		t.Fatal("set over GOGC")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("target %d with GOGC set, want it untouched (100)", got)
	}
}
