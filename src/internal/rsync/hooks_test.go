package rsync

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

func TestHookOrderAndPolicies(t *testing.T) {
	hook := func(name string, weight int, events ...string) appcontext.Resource {
		r := manifest("v1", "Pod", name, "", nil)
		r.Hook = &appcontext.Hook{Events: events, Weight: weight}
		return r
	}
	p := &appcontext.Placement{Resources: []appcontext.Resource{manifest("v1", "ConfigMap", "main", "", nil),
		hook("b", 5, appcontext.HookPreInstall), hook("a", -1, appcontext.HookPreInstall, appcontext.HookPreDelete), hook("c", 0, appcontext.HookPostInstall)}}
	var names []string
	for _, r := range hooksAt(p, appcontext.HookPreInstall) {
		names = append(names, r.Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Fatalf("pre-install hooks %v, want a (weight -1), b (5)", names)
	}
	if len(withoutHooks(p).Resources) != 1 {
		t.Fatal("withoutHooks kept a hook")
	}
	none, some := &appcontext.Hook{}, &appcontext.Hook{DeletePolicies: []string{appcontext.HookSucceeded}}
	if !none.Deletes(appcontext.HookBeforeCreation) || none.Deletes(appcontext.HookSucceeded) ||
		some.Deletes(appcontext.HookBeforeCreation) || !some.Deletes(appcontext.HookSucceeded) {
		t.Fatal("delete policies: before-hook-creation is the default only when none is given")
	}
}

// A hook is done as its cluster reports it: a Pod once Succeeded, a Job
// or workload once Ready, other kinds once applied.
func TestHookOutcome(t *testing.T) {
	pod := manifest("v1", "Pod", "h", "", nil)
	job := manifest("batch/v1", "Job", "j", "", nil)
	cm := manifest("v1", "ConfigMap", "c", "", nil)
	observed := func(entries ...*appcontext.BundleEntry) *appcontext.Placement {
		var list []appcontext.BundleEntry
		for _, e := range entries {
			list = append(list, *e)
		}
		return &appcontext.Placement{Bundle: &appcontext.BundleSnapshot{Index: appcontext.MakeBundleIndex(list)}}
	}
	podIn := func(phase, ready string) *appcontext.BundleEntry {
		return &appcontext.BundleEntry{Kind: "Pod", Name: "h", Namespace: "ns", ReadyStatus: ready,
			Typed: &v1alpha1.ResourceStatus{Status: &runtime.RawExtension{Raw: []byte(`{"phase":"` + phase + `"}`)}}}
	}
	cases := map[string]struct {
		obs          *appcontext.Placement
		r            appcontext.Resource
		done, failed bool
	}{
		"no bundle yet":               {nil, pod, false, false},
		"pod not reported":            {observed(), pod, false, false},
		"pod running, ready":          {observed(podIn("Running", "Ready")), pod, false, false},
		"pod succeeded":               {observed(podIn("Succeeded", "Ready")), pod, true, false},
		"pod failed":                  {observed(podIn("Failed", "Failed")), pod, false, true},
		"job complete":                {observed(&appcontext.BundleEntry{Group: "batch", Kind: "Job", Name: "j", Namespace: "ns", ReadyStatus: "Ready"}), job, true, false},
		"job failed":                  {observed(&appcontext.BundleEntry{Group: "batch", Kind: "Job", Name: "j", Namespace: "ns", ReadyStatus: "Failed", Reason: "backoff"}), job, false, true},
		"config map: once applied":    {nil, cm, true, false},
		"job pending":                 {observed(&appcontext.BundleEntry{Group: "batch", Kind: "Job", Name: "j", Namespace: "ns", ReadyStatus: "Pending"}), job, false, false},
		"other group's Pod: no match": {observed(podIn("Succeeded", "Ready")), appcontext.Resource{GVK: schema.GroupVersionKind{Group: "x", Version: "v1", Kind: "Pod"}, Name: "h"}, false, false},
	}
	for name, tc := range cases {
		done, failed, why := hookOutcome(tc.obs, tc.r, "ns")
		if done != tc.done || (failed != "") != tc.failed || (!done && failed == "" && why == "") {
			t.Errorf("%s: done %v failed %q why %q", name, done, failed, why)
		}
	}
}
