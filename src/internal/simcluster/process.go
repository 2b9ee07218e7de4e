package simcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/argus-mc/argus/src/internal/pdeath"
)

// process is one child process of a cluster. Its waiter goroutine
// (pdeath's) ends when the child exits; stop waits for it.
type process struct {
	name    string
	path    string
	args    []string
	env     []string // added to the environment
	logPath string

	cmd   *exec.Cmd
	child *pdeath.Child // nil until started
}

// start launches the child with its output appended to logPath. The child
// gets its own process group (a terminal's Ctrl-C reaches only simcluster,
// which then stops children in order) and is killed if its parent dies.
func (p *process) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: open log: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	child, err := pdeath.Start(cmd, nil)
	_ = logf.Close() // the child has its copy
	if err != nil {
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	p.cmd, p.child = cmd, child
	return nil
}

// running reports whether the child was started and has not exited.
func (p *process) running() bool {
	if p.child == nil {
		return false
	}
	select {
	case <-p.child.Done():
		return false
	default:
		return true
	}
}

// exited returns a channel closed when the child exits (nil, never
// closed, before it started).
func (p *process) exited() <-chan struct{} {
	if p.child == nil {
		return nil
	}
	return p.child.Done()
}

// stop sends SIGTERM, waits up to grace, then kills. It returns once the
// child has been reaped.
func (p *process) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.child.Done():
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.child.Done()
	}
}

// pid returns the child's process id, or 0 if it is not running.
func (p *process) pid() int {
	if !p.running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// exitError describes how the child ended, for start-up failure messages.
func (p *process) exitError() error {
	if err := p.child.Err(); err != nil {
		return err
	}
	return errors.New("exited")
}
