package rsync

import (
	"context"

	"github.com/sirupsen/logrus"
)

// The engine's tests drive it directly, as its Dispatcher does in the
// orchestrator.

// Instantiate applies a new context's resources, after any action in
// flight on its group.
func (e *Engine) Instantiate(group, id string) { e.start(group, actionApply, id, false) }

// Terminate cancels the actions in flight on the group and deletes the
// context's resources.
func (e *Engine) Terminate(group, id string) { e.start(group, actionDelete, id, true) }

// Busy reports whether an action is running on the group.
func (e *Engine) Busy(group string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.groups[group]
	return r != nil && !closed(r.done)
}

// Resume starts the actions an earlier process left unfinished, as a
// group's new owner does: contexts Instantiating, Updating or
// Terminating, and failed ones rsync was still working on (Active).
func (e *Engine) Resume(ctx context.Context) error {
	list, err := e.opts.Store.List(ctx)
	if err != nil {
		return err
	}
	for _, c := range list { // oldest first: a group's deletion before its next instantiation
		kind := resumeAction(c.Status)
		if kind == "" {
			continue
		}
		e.start(c.Meta.Group, kind, c.Meta.ID, false)
		e.log.WithFields(logrus.Fields{"context": c.Meta.ID, "status": c.Status.Status}).Info("resuming rsync action")
	}
	return nil
}
