package deploy

import (
	"errors"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/placement"
)

func TestValidateIntent(t *testing.T) {
	cases := map[string]struct {
		intent map[string]string
		refuse string
	}{
		"placement":           {map[string]string{"genericPlacementIntent": "gpi"}, ""},
		"placement and gac":   {map[string]string{"genericPlacementIntent": "gpi", "gac": "g"}, ""},
		"gac long name":       {map[string]string{"genericActionController": "g"}, ""},
		"dtc":                 {map[string]string{"genericPlacementIntent": "gpi", "dtc": "d"}, `"dtc"`},
		"ovnaction":           {map[string]string{"ovnaction": "o"}, `"ovnaction"`},
		"hpa":                 {map[string]string{"hpa": "h"}, `"hpa"`},
		"none":                {map[string]string{}, "no intent"},
		"invalid intent name": {map[string]string{"gac": "a/b"}, "invalid"},
	}
	for name, c := range cases {
		err := ValidateIntent(catalog.DIGIntentSpec{Intent: c.intent})
		switch {
		case c.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case c.refuse != "" && (err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), c.refuse)):
			t.Errorf("%s: err = %v, want Invalid naming %s", name, err, c.refuse)
		}
	}
}

func TestCloudPlacement(t *testing.T) {
	c1, c2, c3 := appcontext.ClusterRef{Provider: "cp", Name: "c1"}, appcontext.ClusterRef{Provider: "cp", Name: "c2"}, appcontext.ClusterRef{Provider: "cp", Name: "c3"}
	clusters := []placement.Cluster{{Ref: c1, Labels: []string{"edge"}}, {Ref: c2, Labels: []string{"edge"}}, {Ref: c3, Labels: []string{"edge"}}}
	lc := cloudTarget{namespace: "ns", name: "lc", label: "lc", clusters: map[appcontext.ClusterRef]bool{c1: true, c2: true}}
	byLabel := catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{{ClusterProvider: "cp", ClusterLabel: "edge"}}}
	refs, err := lc.place("web", byLabel, clusters)
	if err != nil || len(refs) != 2 {
		t.Fatalf("a label within the cloud: %v %v", refs, err)
	}
	if refs, err := (cloudTarget{namespace: "default"}).place("web", byLabel, clusters); err != nil || len(refs) != 3 {
		t.Fatalf("no cloud: %v %v", refs, err)
	}
	_, err = lc.place("web", catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{{ClusterProvider: "cp", Cluster: "c3"}}}, clusters)
	if err == nil || !strings.Contains(err.Error(), "does not include") {
		t.Fatalf("a cluster outside the cloud: %v", err)
	}
	anyOf := catalog.PlacementIntent{AnyOf: []catalog.ClusterSelector{{ClusterProvider: "cp", Cluster: "c3"}, {ClusterProvider: "cp", Cluster: "c2"}}}
	if refs, err := lc.place("web", anyOf, clusters); err != nil || len(refs) != 1 || refs[0] != c2 {
		t.Fatalf("anyOf picks within the cloud: %v %v", refs, err)
	}
}
