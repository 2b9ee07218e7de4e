// Package heal is self-heal: for each deployment intent group or v1
// instance whose sync policy says selfHeal, it re-applies what drifted
// (OutOfSync or Missing) without being asked, as Argo CD's self-heal does.
//
// It follows the sample-controller shape. The context cache tells it which
// groups changed (Changed only enqueues); a worker takes a group from a
// rate-limited workqueue, and, if this replica owns the group (the owner
// of its rsync actions), asks the status engine what drifted. A resource
// is healed once it has stayed drifted for Delay, and no sooner than
// Delay·2^streak after its last heal while something keeps undoing it
// (an HPA, an operator: appcontext.Heal.Streak), capped at MaxBackoff;
// the group is looked at again when the next one is due (or, while another
// action runs on it, when it changes, with the workqueue's backoff as a
// safety net). A heal is a sync
// by "self-heal" (deploy.Service.Sync): an rsync action run by the group's
// owner, recorded in the history and seen by subscribers.
//
//	c, _ := heal.New(heal.Options{Contexts: cache, Drift: reader, Healer: deployer, Owner: groups})
//	cache.OnChange(c.Changed)
//	go c.Run(ctx)
package heal
