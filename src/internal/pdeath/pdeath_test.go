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
	first := exec.Command("sleep", "300")
	child, err := Start(first, func() {
		sibling = exec.Command("sleep", "300")
		sibling.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := sibling.Start(); err != nil {
			t.Errorf("start the sibling: %v", err)
			sibling = nil
		}
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
	t.Cleanup(func() { _ = sibling.Process.Kill(); _ = sibling.Wait() })
	if first.SysProcAttr == nil || first.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("the child's attributes: %+v", first.SysProcAttr)
	}
	waited := make(chan error, 1)
	go func() { waited <- sibling.Wait() }()
	// The thread would end just after the goroutine that waited for the
	// first child; three seconds is an observation window.
	select {
	case err := <-waited:
		t.Fatalf("the sibling died with the first child: %v", err)
	case <-time.After(3 * time.Second):
	}
}

// Start keeps the caller's attributes, and reports a child that cannot
// start.
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
	if _, err := Start(exec.Command("/nonexistent/argus-no-such-binary"), nil); err == nil {
		t.Fatal("a missing binary started")
	}
}
