package monitor

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseGVKs(t *testing.T) {
	got, err := ParseGVKs(" k8s.plugin.opnfv.org/v1alpha1/Network, v1/ServiceAccount,,v1/ServiceAccount ")
	if err != nil {
		t.Fatal(err)
	}
	want := []schema.GroupVersionKind{
		{Group: "k8s.plugin.opnfv.org", Version: "v1alpha1", Kind: "Network"},
		{Version: "v1", Kind: "ServiceAccount"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v", got)
	}
	for in, msg := range map[string]string{
		"Network":            "want group/version/Kind",
		"a/b/c/d":            "want group/version/Kind",
		"/v1/Foo":            "empty group",
		"example.com//Foo":   "version and kind are required",
		"example.com/v1/foo": "upper-case",
		"k8splugin.io/v1alpha1/ResourceBundleState": "never tracks",
	} {
		if _, err := ParseGVKs(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseGVKs(%q) = %v, want error containing %q", in, err, msg)
		}
	}
}

func TestListFor(t *testing.T) {
	cases := map[schema.GroupKind]string{
		{Kind: "Pod"}:                                 "podStatuses",
		{Group: "apps", Kind: "StatefulSet"}:          "statefulSetStatuses",
		{Group: "networking.k8s.io", Kind: "Ingress"}: "ingressStatuses",
		{Group: "example.com", Kind: "Widget"}:        "",
		{Group: "extensions", Kind: "Ingress"}:        "",
	}
	for gk, want := range cases {
		if got := listFor(gk); got != want {
			t.Errorf("listFor(%v) = %q, want %q", gk, got, want)
		}
	}
}
