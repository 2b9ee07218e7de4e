package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

func TestResolve(t *testing.T) {
	clusters := []Cluster{
		{Ref: appcontext.ClusterRef{Provider: "cp", Name: "edge1"}, Labels: []string{"edge"}},
		{Ref: appcontext.ClusterRef{Provider: "cp", Name: "edge2"}, Labels: []string{"edge", "gpu"}},
		{Ref: appcontext.ClusterRef{Provider: "cp", Name: "core"}},
		{Ref: appcontext.ClusterRef{Provider: "other", Name: "edge9"}, Labels: []string{"edge"}},
	}
	c := func(n string) catalog.ClusterSelector {
		return catalog.ClusterSelector{ClusterProvider: "cp", Cluster: n}
	}
	l := func(n string) catalog.ClusterSelector {
		return catalog.ClusterSelector{ClusterProvider: "cp", ClusterLabel: n}
	}
	cases := map[string]struct {
		intent catalog.PlacementIntent
		want   string
		err    string
	}{
		"allOf clusters":             {catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{c("edge1"), c("core")}}, "cp+core,cp+edge1", ""},
		"allOf label (one provider)": {catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{l("edge")}}, "cp+edge1,cp+edge2", ""},
		"anyOf picks one, stably":    {catalog.PlacementIntent{AnyOf: []catalog.ClusterSelector{c("edge2"), c("core")}}, "cp+core", ""},
		"anyOf prefers allOf's":      {catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{c("edge2")}, AnyOf: []catalog.ClusterSelector{l("edge")}}, "cp+edge2", ""},
		"unknown cluster":            {catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{c("nope")}}, "", "cp+nope, which does not exist"},
		"unknown label":              {catalog.PlacementIntent{AnyOf: []catalog.ClusterSelector{l("arm")}}, "", `label "arm"`},
		"empty intent":               {catalog.PlacementIntent{}, "", "selects no cluster"},
		"no provider":                {catalog.PlacementIntent{AllOf: []catalog.ClusterSelector{{Cluster: "x"}}}, "", "without clusterProvider"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Resolve(tc.intent, clusters)
			if tc.err != "" {
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrInvalid with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range got {
				names = append(names, fmt.Sprint(r))
			}
			if strings.Join(names, ",") != tc.want {
				t.Fatalf("got %v, want %s", names, tc.want)
			}
		})
	}
}
