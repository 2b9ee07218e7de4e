package deploy

import (
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
)

func TestFindCycle(t *testing.T) {
	d := func(apps ...string) []appcontext.Dependency {
		var out []appcontext.Dependency
		for _, a := range apps {
			out = append(out, appcontext.Dependency{App: a, OpStatus: appcontext.OpStatusReady})
		}
		return out
	}
	for name, c := range map[string]struct {
		deps map[string][]appcontext.Dependency
		want string
	}{
		"none":      {nil, ""},
		"chain":     {map[string][]appcontext.Dependency{"packetgen": d("firewall"), "firewall": d("sink")}, ""},
		"diamond":   {map[string][]appcontext.Dependency{"a": d("b", "c"), "b": d("d"), "c": d("d")}, ""},
		"self":      {map[string][]appcontext.Dependency{"a": d("a")}, "a -> a"},
		"two":       {map[string][]appcontext.Dependency{"firewall": d("packetgen"), "packetgen": d("firewall")}, "firewall -> packetgen -> firewall"},
		"three":     {map[string][]appcontext.Dependency{"a": d("b"), "b": d("c"), "c": d("a")}, "a -> b -> c -> a"},
		"tail loop": {map[string][]appcontext.Dependency{"a": d("b"), "b": d("c"), "c": d("b")}, "b -> c -> b"},
	} {
		if got := strings.Join(findCycle(c.deps), " -> "); got != c.want {
			t.Errorf("%s: cycle %q, want %q", name, got, c.want)
		}
	}
}

func TestValidateDependency(t *testing.T) {
	for _, c := range []struct {
		spec   catalog.AppDependencySpec
		status string // the spelling kept; "" for refused
	}{
		{catalog.AppDependencySpec{App: "fw", OpStatus: "ready", Wait: 2}, "Ready"},
		{catalog.AppDependencySpec{App: "fw", OpStatus: "DEPLOYED"}, "Deployed"},
		{catalog.AppDependencySpec{App: "fw", OpStatus: "Running"}, ""},
		{catalog.AppDependencySpec{App: "", OpStatus: "Ready"}, ""},
		{catalog.AppDependencySpec{App: "fw", OpStatus: "Ready", Wait: -1}, ""},
		{catalog.AppDependencySpec{App: "fw", OpStatus: "Ready", Wait: MaxDependencyWait + 1}, ""},
	} {
		spec := c.spec
		err := ValidateDependency(&spec)
		if (err == nil) != (c.status != "") || (err == nil && spec.OpStatus != c.status) {
			t.Errorf("%+v: %v, opStatus %q; want %q", c.spec, err, spec.OpStatus, c.status)
		}
	}
}
