//go:build linux

package pdeath

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The main thread never ends (the runtime wedges it instead), so no
	// test goroutine may run on it for the thread test to mean anything.
	runtime.LockOSThread()
	os.Exit(m.Run())
}

// The thread that started a child outlives it: another child that thread
// started, with its own parent-death signal, is not killed when the first
// ends (a CI run lost simulated clusters' control planes this way).
func TestTheStartingThreadOutlivesTheChild(t *testing.T) {
	var sibling *exec.Cmd
	waited := make(chan error, 1)
	first := exec.Command("sleep", "300")
	child, err := Start(first, func() {
		s := exec.Command("sleep", "300")
		s.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := s.Start(); err != nil {
			t.Errorf("start the sibling: %v", err)
			return
		}
		sibling = s
		go func() { waited <- s.Wait() }()
		t.Cleanup(func() { _ = s.Process.Kill(); <-waited })
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Process.Kill()
	if err := child.Err(); err == nil {
		t.Fatal("a killed child exited cleanly")
	}
	if sibling == nil {
		t.FailNow()
	}
	// The thread would end just after the goroutine that waited for the
	// first child; three seconds is an observation window.
	select {
	case err := <-waited:
		t.Fatalf("the sibling died with the first child: %v", err)
	case <-time.After(3 * time.Second):
	}
}

// Start keeps the caller's attributes and chosen signal, and reports a
// child that cannot start.
func TestStartKeepsAttributesAndReportsFailure(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	child, err := Start(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Err(); err != nil {
		t.Fatal(err)
	}
	if !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("attributes %+v", cmd.SysProcAttr)
	}
	// A signal the caller chose is kept, and shared attributes are not
	// written to.
	shared := &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	term := exec.Command("true")
	term.SysProcAttr = shared
	child, err = Start(term, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = child.Err()
	if term.SysProcAttr.Pdeathsig != syscall.SIGTERM || term.SysProcAttr == shared {
		t.Fatalf("attributes %+v (shared %v)", term.SysProcAttr, term.SysProcAttr == shared)
	}
	if _, err := Start(exec.Command("/nonexistent/argus-no-such-binary"), nil); err == nil {
		t.Fatal("a missing binary started")
	}
}
