package rsync

import (
	"context"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Delegate hands the placements on pull clusters to their agents (the
// fleet hub): rsync never talks to such a cluster. It publishes what the
// cluster's agent must do — the placement, or its deletion — and follows
// what the agent reports, which the hub stores in the context as any
// resource status; the agent applies with this same engine, in its
// cluster. App dependencies are waited for here, before publishing, with
// the view of every cluster the orchestrator has.
type Delegate interface {
	// Pulls reports whether ref is a pull cluster.
	Pulls(ref appcontext.ClusterRef) bool
	// Publish makes p the work of p's cluster — to install, update or
	// delete — and returns the work's generation; publishing what is
	// published already returns its generation unchanged.
	Publish(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, kind WorkKind) (int64, error)
	// Follow returns the agent's progress on a placement, the current
	// progress first, until stop is called.
	Follow(id, app string, ref appcontext.ClusterRef) (progress <-chan Progress, stop func())
	// WaitObserved returns once Observed reflects etcd revision rev.
	WaitObserved(ctx context.Context, rev int64) error
	// Forget removes a placement's work once its deletion settled: the
	// agent forgets it.
	Forget(ctx context.Context, id, app string, ref appcontext.ClusterRef) error
}

// WorkKind is what an agent does with a placement: install it (Helm's
// install hooks run), update it (they do not, as in EMCO), or delete it
// (the delete hooks run).
type WorkKind string

// Work kinds.
const (
	WorkInstall WorkKind = "install"
	WorkUpdate  WorkKind = "update"
	WorkDelete  WorkKind = "delete"
)

// Progress is an agent's progress on one generation of a placement.
type Progress struct {
	Generation int64
	// Quiet: every resource was tried once; Settled: the agent's action
	// on the generation ended.
	Quiet, Settled bool
	// Revision is the etcd revision that stored it, with the statuses.
	Revision int64
}

// delegated reports whether ref's placements go to its agent.
func (e *Engine) delegated(ref appcontext.ClusterRef) bool {
	return e.opts.Delegate != nil && e.opts.Delegate.Pulls(ref)
}

// runRemote applies a placement on a pull cluster: once the apps it
// depends on are where they must be, it publishes the placement and
// follows the agent until it settled that generation, counting the
// statuses the agent reports. While the agent is away the placement keeps
// the statuses it last reported.
func (pa *placementApply) runRemote(ctx context.Context) {
	firstDone := sync.OnceFunc(pa.firstDone)
	defer firstDone()
	p := pa.p
	if deps := pa.c.Meta.Dependencies[p.App]; len(deps) > 0 {
		if todo, _ := pa.work(); len(todo) > 0 && !pa.waitDependencies(ctx, deps, todo, firstDone) {
			return
		}
	}
	kind := WorkInstall
	if pa.update {
		kind = WorkUpdate
	}
	pa.e.followRemote(ctx, pa.c, p, pa.rec, kind, firstDone, pa.log)
}

// deleteRemote deletes a placement from a pull cluster through its agent
// and forgets the placement's work once that settled.
func (e *Engine) deleteRemote(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, rec *recorder, log *logrus.Entry) {
	log = log.WithFields(logrus.Fields{"app": p.App, "cluster": p.Cluster.String()})
	if !e.followRemote(ctx, c, p, rec, WorkDelete, func() {}, log) {
		return
	}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		err := e.opts.Delegate.Forget(ctx, c.Meta.ID, p.App, p.Cluster)
		if err == nil {
			return
		}
		log.WithError(err).Warn("cannot forget a pull cluster's work; retrying")
		if !e.sleep(ctx, attempt) {
			return
		}
	}
}

// followRemote publishes a placement (or its deletion) and waits until the
// agent settled it; it reports whether it did before ctx ended.
func (e *Engine) followRemote(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, rec *recorder, kind WorkKind, quiet func(), log *logrus.Entry) bool {
	d := e.opts.Delegate
	var gen int64
	for attempt := 1; ; attempt++ {
		var err error
		if gen, err = d.Publish(ctx, c, p, kind); err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		log.WithError(err).WithField("attempt", attempt).Warn("cannot publish a pull cluster's work; retrying")
		if !e.sleep(ctx, attempt) {
			return false
		}
	}
	// The statuses are counted when the agent says it tried everything
	// (quiet) and when it is done (settled), not at every change of the
	// group: a DIG on thousands of pull clusters would read itself once
	// per placement per change.
	progress, stop := d.Follow(c.Meta.ID, p.App, p.Cluster)
	defer stop()
	observe := func() {
		_ = e.opts.Observed.View(ctx, c.Meta.ID, func(obs *appcontext.Context, _ map[appcontext.ClusterRef]appcontext.ClusterState) {
			var op *appcontext.Placement
			if obs != nil {
				op = obs.Placement(p.App, p.Cluster)
			}
			if op == nil {
				return
			}
			for _, r := range p.Resources {
				if st, ok := op.Statuses[r.Key()]; ok {
					rec.observe(p, r.Key(), st)
				}
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case pr := <-progress:
			if pr.Generation < gen || (!pr.Quiet && !pr.Settled) {
				continue
			}
			if err := d.WaitObserved(ctx, pr.Revision); err != nil {
				return false
			}
			observe()
			quiet()
			if pr.Settled {
				log.WithField("generation", gen).Debug("the agent settled the placement")
				return true
			}
		}
	}
}
