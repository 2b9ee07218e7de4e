package fleetsim

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/agent"
)

// memCluster is one simulated cluster's Kubernetes side: the placements
// it holds and each resource's readiness, in memory. Apply answers at
// once (every resource Applied and Ready); churn flips readiness.
type memCluster struct {
	name string

	mu         sync.Mutex
	r          agent.Reporter // set by Run; nil before
	placements map[agent.WorkKey]*placement
	version    int64 // the bundles' resourceVersion
}

type placement struct {
	work  agent.Work
	keys  []string // resources by appcontext key, in work order
	ready map[string]bool
}

var _ agent.Cluster = (*memCluster)(nil)

func newMemCluster(name string) *memCluster {
	return &memCluster{name: name, placements: map[agent.WorkKey]*placement{}}
}

// Run keeps the reporter until ctx ends; what was applied before (or
// while disconnected, by an earlier run) is reported again.
func (c *memCluster) Run(ctx context.Context, r agent.Reporter) error {
	c.mu.Lock()
	c.r = r
	for _, p := range c.placements {
		c.reportLocked(p)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.r = nil
	c.mu.Unlock()
	return nil
}

// Apply makes w the placement's state: every resource Applied and Ready,
// or, for a deletion, Deleted and the bundle gone.
func (c *memCluster) Apply(w agent.Work) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.Delete {
		delete(c.placements, w.Key)
		if c.r != nil {
			st := map[string]appcontext.ResourceStatus{}
			for _, res := range w.Resources {
				st[key(res)] = appcontext.ResourceStatus{Status: appcontext.RsyncDeleted}
			}
			c.r.Statuses(w.Key, w.Generation, st)
			c.r.Progress(w.Key, w.Generation, true, true)
			c.version++
			c.r.Bundle(agent.Bundle{Namespace: ns(w), Name: bundleName(w), StatusID: w.StatusID, App: w.Key.App,
				ResourceVersion: strconv.FormatInt(c.version, 10), Deleted: true})
		}
		return
	}
	p := &placement{work: w, ready: map[string]bool{}}
	if old := c.placements[w.Key]; old != nil {
		p.ready = old.ready
	}
	for _, res := range w.Resources {
		if res.Removed {
			continue
		}
		k := key(res)
		p.keys = append(p.keys, k)
		if _, ok := p.ready[k]; !ok {
			p.ready[k] = true
		}
	}
	c.placements[w.Key] = p
	if c.r != nil {
		c.reportLocked(p)
	}
}

// Forget drops a placement, leaving nothing to report.
func (c *memCluster) Forget(k agent.WorkKey) {
	c.mu.Lock()
	delete(c.placements, k)
	c.mu.Unlock()
}

// Monitor: the in-memory cluster's monitor always runs.
func (c *memCluster) Monitor() (string, string) { return appcontext.MonitorRunning, "" }

// reportLocked reports the placement's statuses, its progress and its
// bundle. Called with mu held.
func (c *memCluster) reportLocked(p *placement) {
	st := make(map[string]appcontext.ResourceStatus, len(p.keys))
	for _, k := range p.keys {
		st[k] = appcontext.ResourceStatus{Status: appcontext.RsyncApplied, Manifest: manifestOf(p.work, k)}
	}
	c.r.Statuses(p.work.Key, p.work.Generation, st)
	c.r.Progress(p.work.Key, p.work.Generation, true, true)
	c.bundleLocked(p)
}

func (c *memCluster) bundleLocked(p *placement) {
	c.version++
	c.r.Bundle(agent.Bundle{Namespace: ns(p.work), Name: bundleName(p.work), StatusID: p.work.StatusID, App: p.work.Key.App,
		ResourceVersion: strconv.FormatInt(c.version, 10), Status: bundleStatus(p)})
}

// flip changes the readiness of the n-th resource (counted over every
// placement, in no fixed order) and reports the bundle; it returns the
// change, ok false when the cluster holds nothing or is not running.
func (c *memCluster) flip(n int) (Change, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r == nil {
		return Change{}, false
	}
	total := 0
	for _, p := range c.placements {
		total += len(p.keys)
	}
	if total == 0 {
		return Change{}, false
	}
	n %= total
	for _, k := range slices.SortedFunc(maps.Keys(c.placements), byKey) {
		p := c.placements[k]
		if n >= len(p.keys) {
			n -= len(p.keys)
			continue
		}
		res := p.keys[n]
		p.ready[res] = !p.ready[res]
		ch := Change{Cluster: c.name, App: p.work.Key.App, Resource: res, Ready: p.ready[res], At: time.Now()}
		c.bundleLocked(p)
		return ch, true
	}
	return Change{}, false
}

func byKey(a, b agent.WorkKey) int {
	return cmp.Or(cmp.Compare(a.Context, b.Context), cmp.Compare(a.App, b.App))
}

func manifestOf(w agent.Work, k string) string {
	for _, res := range w.Resources {
		if key(res) == k {
			return res.SHA256
		}
	}
	return ""
}

func key(r agent.Resource) string {
	return appcontext.Resource{GVK: r.GVK, Name: r.Name, Namespace: r.Namespace}.Key()
}

func ns(w agent.Work) string {
	if w.Namespace == "" {
		return "default"
	}
	return w.Namespace
}

func bundleName(w agent.Work) string { return w.Key.App + "-" + w.StatusID }

// bundleStatus is the ResourceBundleState status the monitor would write:
// ConfigMaps in their list, every other kind as a custom resource.
func bundleStatus(p *placement) []byte {
	type entry = map[string]any
	var cms, others []entry
	allReady := true
	for _, res := range p.work.Resources {
		if res.Removed {
			continue
		}
		k := key(res)
		ready := "Ready"
		if !p.ready[k] {
			ready, allReady = "Pending", false
		}
		meta := entry{"name": res.Name, "namespace": res.Namespace}
		if res.GVK.Kind == "ConfigMap" && res.GVK.Group == "" {
			cms = append(cms, entry{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "readyStatus": ready})
			continue
		}
		others = append(others, entry{"group": res.GVK.Group, "version": res.GVK.Version, "kind": res.GVK.Kind,
			"name": res.Name, "namespace": res.Namespace, "object": entry{"metadata": meta}, "readyStatus": ready})
	}
	reason := ""
	if !allReady {
		reason = "simulated: not every resource is ready"
	}
	data, _ := json.Marshal(entry{"ready": allReady, "resourceCount": len(cms) + len(others), "reason": reason,
		"configMapStatuses": cms, "resourceStatuses": others})
	return data
}
