package deploy

import (
	"context"
	"errors"
	"fmt"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/placement"
)

// cloudTarget is where a DIG deploys: a namespace, the logical cloud whose
// credentials apply it ("" for the clusters' own) and the clusters the
// cloud includes (nil: any).
type cloudTarget struct {
	namespace string
	name      string
	label     string // for messages
	clusters  map[appcontext.ClusterRef]bool
}

// place resolves an app's placement within the cloud's clusters: an allOf
// cluster outside the cloud is refused (EMCO: the cloud must provide the
// mandatory clusters); anyOf chooses among the cloud's clusters only.
func (t cloudTarget) place(app string, intent catalog.PlacementIntent, clusters []placement.Cluster) ([]appcontext.ClusterRef, error) {
	if t.clusters == nil {
		refs, err := placement.Resolve(intent, clusters)
		if err != nil {
			return nil, fmt.Errorf("app %q: %w", app, err)
		}
		return refs, nil
	}
	inCloud := func(sel catalog.ClusterSelector) bool {
		return sel.Cluster == "" || t.clusters[appcontext.ClusterRef{Provider: sel.ClusterProvider, Name: sel.Cluster}]
	}
	for _, sel := range intent.AllOf {
		if !inCloud(sel) {
			return nil, errdefs.Invalid("app %q is placed on cluster %s+%s, which logical cloud %q does not include", app, sel.ClusterProvider, sel.Cluster, t.label)
		}
	}
	within := catalog.PlacementIntent{AllOf: intent.AllOf}
	for _, sel := range intent.AnyOf {
		if inCloud(sel) {
			within.AnyOf = append(within.AnyOf, sel)
		}
	}
	if len(intent.AnyOf) > 0 && len(within.AnyOf) == 0 {
		return nil, errdefs.Invalid("app %q: its anyOf names no cluster of logical cloud %q", app, t.label)
	}
	var candidates []placement.Cluster
	for _, c := range clusters {
		if t.clusters[c.Ref] {
			candidates = append(candidates, c)
		}
	}
	refs, err := placement.Resolve(within, candidates)
	if err != nil {
		return nil, fmt.Errorf("app %q in logical cloud %q: %w", app, t.label, err)
	}
	return refs, nil
}

// cloudFor resolves a DIG's logicalCloud. Empty — or "default" when the
// project has no cloud of that name — keeps what Argus always did: the
// clusters' own credentials and namespace "default". Otherwise the cloud
// must exist and be instantiated.
func (s *Service) cloudFor(ctx context.Context, project, name string) (cloudTarget, error) {
	if name == "" {
		return cloudTarget{namespace: Namespace}, nil
	}
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, catalog.Key{project, name})
	if errors.Is(err, errdefs.ErrNotFound) {
		if name == "default" {
			return cloudTarget{namespace: Namespace}, nil
		}
		return cloudTarget{}, errdefs.Invalid("logical cloud %q of project %q does not exist", name, project)
	}
	if err != nil {
		return cloudTarget{}, err
	}
	st, err := logicalcloud.ReadState(ctx, s.opts.Catalog, s.opts.Contexts.Get, catalog.Key{project, name})
	if err != nil {
		return cloudTarget{}, err
	}
	if st.Deployed != appcontext.Instantiated && st.Deployed != appcontext.Updated {
		why := ""
		if st.Reason != "" {
			why = " (" + st.Reason + ")"
		}
		return cloudTarget{}, errdefs.Conflict("logical cloud %q is %s%s; it must be Instantiated to deploy into it", name, orCreated(st.Deployed), why)
	}
	t := cloudTarget{namespace: logicalcloud.Namespace(lc.Spec), label: name, clusters: map[appcontext.ClusterRef]bool{}}
	if logicalcloud.Standard(lc.Spec) {
		t.name = name
	}
	for _, r := range st.References {
		t.clusters[appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}] = true
	}
	return t, nil
}

func orCreated(s string) string {
	if s == "" {
		return catalog.StateCreated
	}
	return s
}
