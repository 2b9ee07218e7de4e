package pdeath

import (
	"os/exec"
	"runtime"
)

// Child is a started process.
type Child struct {
	done chan struct{}
	err  error
}

// Start starts cmd with a parent-death signal (where the system has one:
// SIGKILL, unless cmd's attributes name another; the rest of them are
// kept) from a goroutine that holds its thread until the child has been
// waited for. then, if not nil, runs on that goroutine after the start and
// before the wait: the place to read the child's pipes to their end, which
// exec.Cmd.Wait requires before it is called. Start returns once the child
// started (or failed to).
func Start(cmd *exec.Cmd, then func()) (*Child, error) {
	setDeathSignal(cmd)
	c := &Child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked, not ended with the goroutine: ending it would end the
		// thread, and with it every other child it started.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		if then != nil {
			then()
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Done is closed once the child has exited and been waited for.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err waits for Done and returns cmd.Wait's error.
func (c *Child) Err() error {
	<-c.done
	return c.err
}
