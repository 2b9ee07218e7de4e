// Package tailbuf keeps what a child process wrote to its stderr, for the
// error that says why it stopped: the first and the last bytes of it, a
// fixed amount of each (a Go crash says why at the start, then goes on
// with pages of stacks; a store that fails says so at the end).
//
//	out := tailbuf.New(4 << 10)
//	cmd.Stderr = out
//	...
//	return fmt.Errorf("worker stopped: %s", out.Line("fatal error:", "panic:"))
package tailbuf
