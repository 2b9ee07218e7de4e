package rsync

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Observed is what rsync learns about its contexts from the clusters: the
// watch-fed context cache (appcontext.Cache). rsync orders apps by their
// dependencies with it, woken by its changes, never polling.
type Observed interface {
	// View calls f with the context as last observed (nil if unknown)
	// and every cluster's state; f must not keep them.
	View(ctx context.Context, id string, f func(*appcontext.Context, map[appcontext.ClusterRef]appcontext.ClusterState)) error
	// OnChange registers f to be told the groups each batch of changes
	// touched; it is called once, before the cache runs.
	OnChange(f func(groups []string))
}

var _ Observed = (*appcontext.Cache)(nil)

// changed wakes whatever waits on one of the groups.
func (e *Engine) changed(groups []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range groups {
		for _, ch := range e.waiters[g] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// listen returns a channel told of every change of group, and its removal.
func (e *Engine) listen(group string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextWaiter++
	id := e.nextWaiter
	if e.waiters[group] == nil {
		e.waiters[group] = map[uint64]chan struct{}{}
	}
	e.waiters[group][id] = ch
	return ch, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.waiters[group], id)
		if len(e.waiters[group]) == 0 {
			delete(e.waiters, group)
		}
	}
}

// dependencyTargets are the placements an app on a cluster waits for to
// satisfy dep: the dependency's placement on the same cluster, or, where
// it is not placed on that cluster, all of its placements.
func dependencyTargets(c *appcontext.Context, p *appcontext.Placement, dep appcontext.Dependency) []*appcontext.Placement {
	if t := c.Placement(dep.App, p.Cluster); t != nil && !emptied(t) {
		return []*appcontext.Placement{t}
	}
	var out []*appcontext.Placement
	for _, t := range c.Placements {
		if t.App == dep.App && !emptied(t) {
			out = append(out, t)
		}
	}
	return out
}

// emptied reports a placement whose resources are all marked Removed: an
// update moved the app off the cluster.
func emptied(p *appcontext.Placement) bool {
	for _, r := range p.Resources {
		if !r.Removed {
			return false
		}
	}
	return true
}

// reached reports whether the placement want (as the action's context has
// it) reached opStatus in the observed placement obs: Deployed, every
// resource applied with its current manifest; Ready, that and every
// resource Ready in the app's ResourceBundleState, which itself says
// Ready (pods included). It says what is missing when not. Pure.
func reached(want, obs *appcontext.Placement, opStatus, namespace string) (bool, string) {
	if obs == nil {
		return false, "not recorded yet"
	}
	for _, r := range want.Resources {
		if r.Removed || r.Hook != nil { // hooks run at their events
			continue
		}
		st := obs.StatusOf(r.Key())
		if st.Status != appcontext.RsyncApplied || (r.ManifestRef != nil && st.Manifest != r.ManifestRef.SHA256) {
			return false, fmt.Sprintf("%s/%s is not applied yet (rsync: %s)", r.GVK.Kind, r.Name, st.Status)
		}
	}
	if opStatus != appcontext.OpStatusReady {
		return true, ""
	}
	b := obs.Bundle
	switch {
	case b == nil || b.Deleted:
		return false, "its ResourceBundleState has not reported yet"
	case b.Parsed == nil:
		return false, "its ResourceBundleState cannot be read: " + b.Refused
	}
	for _, r := range want.Resources {
		if r.Removed || r.Hook != nil {
			continue
		}
		ns := r.Namespace
		if ns == "" {
			ns = namespace
		}
		e := b.Index.Get(appcontext.EntryRef{Group: r.GVK.Group, Kind: r.GVK.Kind, Namespace: ns, Name: r.Name})
		if e == nil { // a cluster-scoped object is reported without a namespace
			e = b.Index.Get(appcontext.EntryRef{Group: r.GVK.Group, Kind: r.GVK.Kind, Name: r.Name})
		}
		switch {
		case e == nil:
			return false, r.GVK.Kind + "/" + r.Name + " is not reported by the cluster yet"
		case e.ReadyStatus != "Ready":
			reason := r.GVK.Kind + "/" + r.Name + " is " + e.ReadyStatus
			if e.Reason != "" {
				reason += " (" + e.Reason + ")"
			}
			return false, reason
		}
	}
	if !b.Parsed.Ready {
		if b.Parsed.Reason != "" {
			return false, b.Parsed.Reason
		}
		return false, "not Ready yet"
	}
	return true, ""
}

// dependencyMet reports whether dep is satisfied for placement p of the
// action's context c, as the cache observes it, and if not why.
func (e *Engine) dependencyMet(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, dep appcontext.Dependency) (bool, string, error) {
	targets := dependencyTargets(c, p, dep)
	if len(targets) == 0 {
		return true, "", nil // placed nowhere: nothing to wait for
	}
	met, why := true, ""
	err := e.opts.Observed.View(ctx, c.Meta.ID, func(obs *appcontext.Context, _ map[appcontext.ClusterRef]appcontext.ClusterState) {
		for _, t := range targets {
			var o *appcontext.Placement
			if obs != nil {
				o = obs.Placement(t.App, t.Cluster)
			}
			if ok, reason := reached(t, o, dep.OpStatus, c.Meta.Namespace); !ok {
				met, why = false, fmt.Sprintf("waiting for app %s to be %s on %s: %s", dep.App, dep.OpStatus, t.Cluster, reason)
				return
			}
		}
	})
	return met, why, err
}

// waitDependencies holds a placement until every app it depends on reached
// its state (and the dependency's wait passed), showing its resources
// Waiting with the reason meanwhile. Woken by the cache's changes of the
// group; false when ctx ended first.
func (pa *placementApply) waitDependencies(ctx context.Context, deps []appcontext.Dependency, todo []appcontext.Resource, waiting func()) bool {
	if pa.e.opts.Observed == nil {
		pa.log.Warn("app dependencies are not ordered: rsync has no view of the clusters")
		return true
	}
	changed, release := pa.e.listen(pa.c.Meta.Group)
	defer release()
	shown := ""
	show := func(reason string) {
		if reason == shown {
			return
		}
		shown = reason
		for _, r := range todo {
			pa.rec.record(pa.p, r.Key(), appcontext.ResourceStatus{Status: appcontext.RsyncWaiting, Error: reason})
		}
		waiting()
	}
	for _, dep := range deps {
		for {
			met, why, err := pa.e.dependencyMet(ctx, pa.c, pa.p, dep)
			if err != nil || ctx.Err() != nil {
				return false
			}
			if met {
				break
			}
			show(why)
			select {
			case <-ctx.Done():
				return false
			case <-changed:
			}
		}
		if dep.Wait > 0 {
			show(fmt.Sprintf("waiting %s after app %s became %s", dep.Wait, dep.App, dep.OpStatus))
			t := time.NewTimer(dep.Wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
	}
	if shown != "" {
		pa.log.WithField("dependencies", describeDeps(deps)).Info("dependencies met")
	}
	return true
}

func describeDeps(deps []appcontext.Dependency) string {
	parts := make([]string, 0, len(deps))
	for _, d := range deps {
		parts = append(parts, d.App+" "+d.OpStatus)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// dependents lists the placements that wait for placement a of context c
// to apply: on terminate they are deleted before it.
func dependents(c *appcontext.Context, a *appcontext.Placement) []*appcontext.Placement {
	var out []*appcontext.Placement
	for _, d := range c.Placements {
		for _, dep := range c.Meta.Dependencies[d.App] {
			if dep.App != a.App {
				continue
			}
			for _, t := range dependencyTargets(c, d, dep) {
				if t == a {
					out = append(out, d)
				}
			}
		}
	}
	return out
}
