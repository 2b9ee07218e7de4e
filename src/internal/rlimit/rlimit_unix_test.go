//go:build unix

package rlimit

import (
	"syscall"
	"testing"
)

// Go's runtime raises the soft limit to the hard one at start-up, so the
// test first lowers it (restored afterwards): RaiseNoFile must then raise
// it itself, and report the raised value.
func TestRaiseNoFile(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.Max < 128 {
		t.Fatalf("hard open-file limit %d: too low to test raising under it", orig.Max)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
			t.Errorf("restore the open-file limit: %v", err)
		}
	})
	low := syscall.Rlimit{Cur: 64, Max: orig.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}

	soft, err := RaiseNoFile()
	if err != nil {
		t.Fatal(err)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur != orig.Max || soft != uint64(orig.Max) {
		t.Fatalf("after raising from 64: soft limit %d, reported %d; want the hard limit %d", now.Cur, soft, orig.Max)
	}
	if again, err := RaiseNoFile(); err != nil || again != soft {
		t.Fatalf("second raise: %d %v, want %d", again, err, soft)
	}
}
