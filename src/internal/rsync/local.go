package rsync

import "github.com/argus-mc/argus/src/internal/ownership"

// Run starts an action on a context for a caller that decides itself what
// runs, without a Dispatcher: a fleet agent, whose contexts are its own
// cluster's work (Options.Contexts). An install or update runs after any
// action in flight on the group; a deletion cancels them first. The
// channel closes once the action tried every resource once (or ended).
// Release cancels the group's actions and waits for them.
func (e *Engine) Run(group, id string, kind WorkKind) <-chan struct{} {
	switch kind {
	case WorkDelete:
		return e.start(group, actionDelete, id, true, ownership.Fence{}).quiet
	case WorkUpdate:
		return e.start(group, actionUpdate, id, false, ownership.Fence{}).quiet
	default:
		return e.start(group, actionApply, id, false, ownership.Fence{}).quiet
	}
}
