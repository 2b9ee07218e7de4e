package rsync

import "context"

// Idle waits until no action on the group is at work, or ctx ends: none
// runs, or the one that runs has tried every resource once and now only
// waits for the world (a CRD to be installed, a cluster to answer) — what
// an update supersedes. A caller that must not change a context while
// rsync works on it (a v1 upgrade, a config change) waits here instead of
// refusing at once.
func (e *Engine) Idle(ctx context.Context, group string) error {
	for {
		r := e.running(group)
		if r == nil {
			return nil
		}
		select {
		case <-r.done:
		case <-r.quiet:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// running returns the group's latest action if it has not finished.
func (e *Engine) running(group string) *run {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.groups[group]
	if r == nil || closed(r.done) {
		return nil
	}
	return r
}
