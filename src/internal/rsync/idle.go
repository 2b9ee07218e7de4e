package rsync

import "context"

// Idle waits until no action runs or waits on the group, or ctx ends. A
// caller that must not change a context while rsync works on it (a v1
// upgrade, a config change) waits here instead of refusing at once.
func (e *Engine) Idle(ctx context.Context, group string) error {
	for {
		r := e.running(group)
		if r == nil {
			return nil
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
