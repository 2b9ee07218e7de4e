package rsync

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

func TestReached(t *testing.T) {
	dep := appcontext.Resource{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Name: "fw",
		ManifestRef: &appcontext.BlobRef{SHA256: "new"}}
	pv := appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolume"}, Name: "pv"}
	want := &appcontext.Placement{App: "firewall", Resources: []appcontext.Resource{dep, pv}}
	applied := map[string]appcontext.ResourceStatus{dep.Key(): {Status: appcontext.RsyncApplied, Manifest: "new"}, pv.Key(): {Status: appcontext.RsyncApplied}}
	bundle := func(ready bool, fwStatus string) *appcontext.BundleSnapshot {
		st := &v1alpha1.ResourceBundleStateStatus{Ready: ready}
		entries := []appcontext.BundleEntry{
			{Group: "", Kind: "PersistentVolume", Name: "pv", ReadyStatus: "Ready"}, // cluster-scoped: no namespace
		}
		if fwStatus != "" {
			entries = append(entries, appcontext.BundleEntry{Group: "apps", Kind: "Deployment", Namespace: "ns", Name: "fw", ReadyStatus: fwStatus, Reason: "0/1 replicas"})
		}
		return &appcontext.BundleSnapshot{Parsed: st, Index: appcontext.MakeBundleIndex(entries)}
	}
	for name, c := range map[string]struct {
		obs      *appcontext.Placement
		opStatus string
		met      bool
		why      string
	}{
		"not recorded":         {nil, appcontext.OpStatusDeployed, false, "not recorded"},
		"pending":              {&appcontext.Placement{}, appcontext.OpStatusDeployed, false, "Deployment/fw is not applied yet (rsync: Pending)"},
		"old manifest applied": {&appcontext.Placement{Statuses: map[string]appcontext.ResourceStatus{dep.Key(): {Status: appcontext.RsyncApplied, Manifest: "old"}}}, appcontext.OpStatusDeployed, false, "not applied yet"},
		"deployed":             {&appcontext.Placement{Statuses: applied}, appcontext.OpStatusDeployed, true, ""},
		"no bundle":            {&appcontext.Placement{Statuses: applied}, appcontext.OpStatusReady, false, "has not reported"},
		"not reported":         {&appcontext.Placement{Statuses: applied, Bundle: bundle(false, "")}, appcontext.OpStatusReady, false, "Deployment/fw is not reported"},
		"not ready":            {&appcontext.Placement{Statuses: applied, Bundle: bundle(false, "NotReady")}, appcontext.OpStatusReady, false, "Deployment/fw is NotReady (0/1 replicas)"},
		"pods not ready":       {&appcontext.Placement{Statuses: applied, Bundle: bundle(false, "Ready")}, appcontext.OpStatusReady, false, "not Ready yet"},
		"ready":                {&appcontext.Placement{Statuses: applied, Bundle: bundle(true, "Ready")}, appcontext.OpStatusReady, true, ""},
	} {
		met, why := reached(want, c.obs, c.opStatus, "ns")
		if met != c.met || !strings.Contains(why, c.why) {
			t.Errorf("%s: reached = %v %q, want %v %q", name, met, why, c.met, c.why)
		}
	}
}

// An app waits for its dependency on its own cluster, or on every cluster
// where the dependency is not placed on its own; terminate deletes the
// waiting placements first.
func TestDependencyTargetsAndDependents(t *testing.T) {
	e1, e2 := appcontext.ClusterRef{Provider: "cp", Name: "e1"}, appcontext.ClusterRef{Provider: "cp", Name: "e2"}
	r := appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: "c"}
	p := func(app string, c appcontext.ClusterRef, removed bool) *appcontext.Placement {
		rr := r
		rr.Removed = removed
		return &appcontext.Placement{App: app, Cluster: c, Resources: []appcontext.Resource{rr}}
	}
	fw1, fw2, pg1, pg2 := p("firewall", e1, false), p("firewall", e2, true), p("packetgen", e1, false), p("packetgen", e2, false)
	c := &appcontext.Context{Placements: []*appcontext.Placement{fw1, fw2, pg1, pg2},
		Meta: appcontext.Meta{Dependencies: map[string][]appcontext.Dependency{"packetgen": {{App: "firewall", OpStatus: appcontext.OpStatusReady}}}}}
	dep := c.Meta.Dependencies["packetgen"][0]
	if got := dependencyTargets(c, pg1, dep); len(got) != 1 || got[0] != fw1 {
		t.Fatalf("packetgen on e1 waits for %v, want the firewall on e1", got)
	}
	// The firewall left e2 (its placement there is all removed): packetgen
	// on e2 waits for the firewall wherever it is.
	if got := dependencyTargets(c, pg2, dep); len(got) != 1 || got[0] != fw1 {
		t.Fatalf("packetgen on e2 waits for %v, want the firewall on e1", got)
	}
	if got := dependents(c, fw1); len(got) != 2 {
		t.Fatalf("dependents of the firewall on e1: %v, want both packetgens", got)
	}
	if got := dependents(c, pg1); len(got) != 0 {
		t.Fatalf("dependents of packetgen: %v", got)
	}
}
