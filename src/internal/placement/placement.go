package placement

import (
	"sort"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Cluster is a known cluster with its labels.
type Cluster struct {
	Ref    appcontext.ClusterRef
	Labels []string
}

// Resolve returns the clusters the intent selects, sorted. A named cluster
// that does not exist, a label no cluster carries, or an intent that selects
// nothing is an errdefs.ErrInvalid error naming it.
func Resolve(intent catalog.PlacementIntent, clusters []Cluster) ([]appcontext.ClusterRef, error) {
	chosen := map[appcontext.ClusterRef]bool{}
	for _, sel := range intent.AllOf {
		refs, err := match(sel, clusters)
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			chosen[r] = true
		}
	}
	if len(intent.AnyOf) > 0 {
		var candidates []appcontext.ClusterRef
		for _, sel := range intent.AnyOf {
			refs, err := match(sel, clusters)
			if err != nil {
				return nil, err
			}
			candidates = append(candidates, refs...)
		}
		sortRefs(candidates)
		// Prefer a cluster allOf already chose; else the first candidate,
		// so the choice is stable across re-instantiation.
		pick := candidates[0]
		for _, c := range candidates {
			if chosen[c] {
				pick = c
				break
			}
		}
		chosen[pick] = true
	}
	if len(chosen) == 0 {
		return nil, errdefs.Invalid("placement intent selects no cluster")
	}
	out := make([]appcontext.ClusterRef, 0, len(chosen))
	for r := range chosen {
		out = append(out, r)
	}
	sortRefs(out)
	return out, nil
}

func match(sel catalog.ClusterSelector, clusters []Cluster) ([]appcontext.ClusterRef, error) {
	switch {
	case sel.ClusterProvider == "":
		return nil, errdefs.Invalid("placement entry without clusterProvider")
	case sel.Cluster != "" && sel.ClusterLabel != "":
		return nil, errdefs.Invalid("placement entry names both cluster %q and clusterLabel %q", sel.Cluster, sel.ClusterLabel)
	case sel.Cluster != "":
		want := appcontext.ClusterRef{Provider: sel.ClusterProvider, Name: sel.Cluster}
		for _, c := range clusters {
			if c.Ref == want {
				return []appcontext.ClusterRef{want}, nil
			}
		}
		return nil, errdefs.Invalid("placement names cluster %s, which does not exist", want)
	case sel.ClusterLabel != "":
		var out []appcontext.ClusterRef
		for _, c := range clusters {
			if c.Ref.Provider != sel.ClusterProvider {
				continue
			}
			for _, l := range c.Labels {
				if l == sel.ClusterLabel {
					out = append(out, c.Ref)
					break
				}
			}
		}
		if len(out) == 0 {
			return nil, errdefs.Invalid("no cluster of provider %q has label %q", sel.ClusterProvider, sel.ClusterLabel)
		}
		return out, nil
	}
	return nil, errdefs.Invalid("placement entry names neither cluster nor clusterLabel")
}

func sortRefs(r []appcontext.ClusterRef) {
	sort.Slice(r, func(i, j int) bool { return r[i].String() < r[j].String() })
}
