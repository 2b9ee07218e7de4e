package catalog

import (
	"slices"
	"testing"
)

func TestParseGroup(t *testing.T) {
	valid := map[string]Group{
		"dig:p/ca/v1/dig":     {Kind: GroupDIG, Key: Key{"p", "ca", "v1", "dig"}},
		"instance:abc":        {Kind: GroupInstance, Key: Key{"abc"}},
		"lc:p/cloud":          {Kind: GroupLogicalCloud, Key: Key{"p", "cloud"}},
		"cluster:prov+c1":     {Kind: GroupCluster, Key: Key{"prov", "c1"}},
		"instance:with/slash": {Kind: GroupInstance, Key: Key{"with/slash"}},
	}
	for id, want := range valid {
		g, ok := ParseGroup(id)
		if !ok || g.Kind != want.Kind || !slices.Equal(g.Key, want.Key) {
			t.Errorf("ParseGroup(%q) = %+v, %v; want %+v", id, g, ok, want)
		}
		if g.String() != id {
			t.Errorf("%+v.String() = %q; want %q", g, g.String(), id)
		}
	}
	for _, id := range []string{"", "dig", "dig:", "dig:p/ca/v1", "dig:p/ca/v1/dig/x", "dig:p//v1/d", "lc:p", "lc:p/",
		"cluster:prov", "cluster:+c", "instance:", "network:x", "ctx:abc", "p/ca/v1/dig"} {
		if g, ok := ParseGroup(id); ok {
			t.Errorf("ParseGroup(%q) = %+v; want refused", id, g)
		}
	}
	if DIGGroup(Key{"p", "ca", "v1", "d"}) != "dig:p/ca/v1/d" || LogicalCloudGroup("p", "c") != "lc:p/c" ||
		ClusterGroup("pr", "c") != "cluster:pr+c" || InstanceGroup("i") != "instance:i" {
		t.Error("group id constructors changed their form, which keys stored lifecycles")
	}
}
