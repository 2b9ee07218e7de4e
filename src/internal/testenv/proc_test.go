package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcStopsOnSIGTERM(t *testing.T) {
	p, err := StartProc(exec.Command("sleep", "60"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if killed := p.Stop(30 * time.Second); killed {
		t.Fatal("sleep needed SIGKILL")
	}
	var exit *exec.ExitError
	if err := p.Err(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("exit: %v, want ended by SIGTERM", err)
	}
	if p.Stop(time.Second) {
		t.Fatal("a second Stop killed")
	}
}

// A process that ignores SIGTERM is killed after the grace period, with
// what it started in its group.
func TestProcKillsItsGroupAfterGrace(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 60 >/dev/null & echo $!; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pid := make(chan int, 1)
	p, err := StartProc(cmd, func() {
		var n int
		_, _ = fmt.Fscan(out, &n)
		pid <- n
		_, _ = io.Copy(io.Discard, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	sleeper := <-pid
	if sleeper <= 0 {
		t.Fatal("the shell did not say its child's pid")
	}
	if !p.Stop(200 * time.Millisecond) {
		t.Fatal("a shell ignoring SIGTERM was not killed")
	}
	deadline := time.Now().Add(30 * time.Second)
	for running(sleeper) { // the group's SIGKILL reaches it
		if time.Now().After(deadline) {
			t.Fatalf("the shell's child %d survived the group kill", sleeper)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// running reports whether pid is a process that has not exited (a zombie
// has: its reaping is up to whoever adopted it).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
