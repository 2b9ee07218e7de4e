package rsync

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// actionSync re-applies what drifted: the resources of the context's
// sync request (appcontext.HealRequest), nothing else.
const actionSync = "sync"

// Sync re-applies the resources the context's sync request names, after
// any action in flight on its group.
func (e *Engine) Sync(group, id string) { e.start(group, actionSync, id, false) }

// syncNames keep a context's lifecycle status through a sync: an
// instantiated context stays Instantiated (or becomes InstantiateFailed if
// a heal is refused), an updated one Updated.
func syncNames(current string) statusNames {
	switch current {
	case appcontext.Updated, appcontext.UpdateFailed, appcontext.Updating:
		return statusNames{appcontext.Updated, appcontext.Updated, appcontext.UpdateFailed}
	}
	return statusNames{appcontext.Instantiated, appcontext.Instantiated, appcontext.InstantiateFailed}
}

// heal carries out the context's sync request: each target is applied
// again (its owner checked first: it may be another's since it went) and
// recorded with one heal more; then the request is cleared.
func (e *Engine) heal(ctx context.Context, id string, log *logrus.Entry, firstPass func()) error {
	c, err := e.opts.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	req := c.Heal
	if req == nil {
		firstPass()
		return nil
	}
	rec := newRecorder(e.ctx, e.opts.Store, c, syncNames(c.Status.Status), log, finalFlushTimeout)
	mode := c.Meta.FieldValidation
	if mode == "" {
		mode = e.opts.FieldValidation
	}
	passed := make(chan struct{})
	close(passed) // no bundles to wait for: they exist already
	var all sync.WaitGroup
	for _, p := range c.Placements {
		var todo []appcontext.Resource
		for _, r := range p.Resources {
			if !r.Removed && targeted(req, p, r.Key()) {
				todo = append(todo, r)
			}
		}
		if len(todo) == 0 {
			continue
		}
		all.Add(1)
		go func() {
			defer all.Done()
			pa := &placementApply{e: e, c: c, p: p, rec: rec, mode: mode, clusterPassed: passed, firstDone: func() {}, heal: req,
				log: log.WithFields(logrus.Fields{"app": p.App, "cluster": p.Cluster.String()})}
			pa.applyAll(ctx, todo, nil, bundleLabels(c.Meta.StatusID, p.App), func() {}, true)
		}()
	}
	all.Wait()
	firstPass()
	rec.finish(ctx.Err() != nil)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return e.opts.Store.ClearHeal(context.WithoutCancel(ctx), id)
}

func targeted(req *appcontext.HealRequest, p *appcontext.Placement, key string) bool {
	for _, t := range req.Targets {
		if t.App == p.App && t.Cluster == p.Cluster && t.Key == key {
			return true
		}
	}
	return false
}

// targetOf is the heal target of a resource of this placement.
func (pa *placementApply) targetOf(key string) appcontext.HealTarget {
	for _, t := range pa.heal.Targets {
		if t.App == pa.p.App && t.Cluster == pa.p.Cluster && t.Key == key {
			return t
		}
	}
	return appcontext.HealTarget{}
}

// Sync asks the group's owner to re-apply the resources of the context's
// sync request. It is refused (errdefs.ErrConflict) while another action
// on the context is requested or at work: a sync never replaces one.
func (d *Dispatcher) Sync(ctx context.Context, group, id string) error {
	created, err := d.recs.Create(ctx, recordKey(group, id), actionRecord{Action: actionSync, Requested: time.Now().UTC()})
	if err != nil {
		return errdefs.Unavailable(err, "cannot record the sync")
	}
	if !created {
		return errdefs.Conflict("an action is in progress on %s; sync when it is done", DescribeGroup(group))
	}
	d.opts.Claims.Want(group)
	return nil
}
