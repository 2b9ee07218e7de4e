package testenv

import (
	"os/exec"
	"syscall"
	"time"

	"github.com/argus-mc/argus/src/internal/pdeath"
)

// Proc is a process a test or benchmark starts: the kernel signals it if
// the test binary dies (pdeath: SIGKILL unless the command's attributes
// name another signal), and Stop ends it as a kubelet would — SIGTERM,
// then SIGKILL after a grace period.
type Proc struct {
	Cmd   *exec.Cmd
	child *pdeath.Child
}

// StartProc starts cmd; then, if not nil, runs before the wait and is the
// place to read the command's pipes to their end (pdeath.Start). Done,
// Stop and Kill wait for then as well: a pipe then reads that a process
// outside the command's group still holds delays them until it closes.
func StartProc(cmd *exec.Cmd, then func()) (*Proc, error) {
	child, err := pdeath.Start(cmd, then)
	if err != nil {
		return nil, err
	}
	return &Proc{Cmd: cmd, child: child}, nil
}

// Done is closed once the process has exited and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.child.Done() }

// Err waits for the process and returns exec.Cmd.Wait's error.
func (p *Proc) Err() error { return p.child.Err() }

// exited reports whether the process has exited and been waited for.
func (p *Proc) exited() bool {
	select {
	case <-p.child.Done():
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to grace for the exit, then sends
// SIGKILL — to the process group when the process leads one (Setpgid) —
// and waits. It reports whether the process had to be killed; a process
// that has exited already is left as it is.
func (p *Proc) Stop(grace time.Duration) (killed bool) {
	if p.exited() {
		return false
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.child.Done():
		return false
	case <-timer.C:
	}
	p.kill()
	return true
}

// Kill ends the process with SIGKILL, as a crash would, and waits.
func (p *Proc) Kill() {
	if !p.exited() {
		p.kill()
	}
}

func (p *Proc) kill() {
	if a := p.Cmd.SysProcAttr; a != nil && a.Setpgid && a.Pgid == 0 {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = p.Cmd.Process.Kill()
	<-p.child.Done()
}
