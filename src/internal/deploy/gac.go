package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/gac"
	"github.com/argus-mc/argus/src/internal/placement"
)

// applyGAC carries out the DIG's generic-k8s-intent named intent on the
// placements: new objects are added, rendered ones patched, per cluster.
func (s *Service) applyGAC(ctx context.Context, dig catalog.Key, intent string, placements []*appcontext.Placement, clusters []placement.Cluster) error {
	resources, err := s.gacResources(ctx, dig, intent)
	if err != nil {
		return err
	}
	labels := map[appcontext.ClusterRef][]string{}
	for _, c := range clusters {
		labels[c.Ref] = c.Labels
	}
	targets := make([]*gac.Target, 0, len(placements))
	for _, p := range placements {
		t := &gac.Target{App: p.App, Cluster: gac.Cluster{Provider: p.Cluster.Provider, Name: p.Cluster.Name, Labels: labels[p.Cluster]}}
		for _, r := range p.Resources {
			o := &unstructured.Unstructured{}
			if err := o.UnmarshalJSON(r.Manifest); err != nil {
				return fmt.Errorf("decode %s of app %q: %w", r.Key(), p.App, err)
			}
			t.Objects = append(t.Objects, o)
		}
		targets = append(targets, t)
	}
	if err := gac.Apply(resources, targets); err != nil {
		return fmt.Errorf("generic k8s intent %q: %w", intent, err)
	}
	for i, t := range targets {
		rs := make([]appcontext.Resource, 0, len(t.Objects))
		for _, o := range t.Objects {
			manifest, err := json.Marshal(o.Object)
			if err != nil {
				return err
			}
			rs = append(rs, appcontext.Resource{GVK: o.GroupVersionKind(), Name: o.GetName(), Namespace: o.GetNamespace(), Manifest: manifest})
		}
		placements[i].Resources = rs
	}
	return nil
}

// gacResources reads an intent's resources and customizations with their
// files.
func (s *Service) gacResources(ctx context.Context, dig catalog.Key, intent string) ([]gac.Resource, error) {
	cat := s.opts.Catalog
	intentKey := append(append(catalog.Key{}, dig...), intent)
	if _, err := catalog.For[catalog.Empty](cat, catalog.GenericK8sIntents).Get(ctx, intentKey); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.Invalid("the intents name generic k8s intent %q, which does not exist", intent)
		}
		return nil, err
	}
	resources := catalog.For[catalog.GACResourceSpec](cat, catalog.GACResources)
	customizations := catalog.For[catalog.CustomizationSpec](cat, catalog.GACCustomizations)
	list, err := resources.List(ctx, intentKey)
	if err != nil {
		return nil, err
	}
	out := make([]gac.Resource, 0, len(list))
	for _, r := range list {
		rKey := append(append(catalog.Key{}, intentKey...), r.Metadata.Name)
		res := gac.Resource{Name: r.Metadata.Name, Spec: r.Spec}
		if res.Template, err = optionalContent(ctx, resources, rKey); err != nil {
			return nil, err
		}
		cs, err := customizations.List(ctx, rKey)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			files, err := optionalContent(ctx, customizations, append(append(catalog.Key{}, rKey...), c.Metadata.Name))
			if err != nil {
				return nil, err
			}
			cu := gac.Customization{Name: c.Metadata.Name, Spec: c.Spec}
			if len(files) > 0 {
				if err := json.Unmarshal(files, &cu.Files); err != nil {
					return nil, fmt.Errorf("files of customization %q: %w", c.Metadata.Name, err)
				}
			}
			res.Customizations = append(res.Customizations, cu)
		}
		out = append(out, res)
	}
	gac.SortResources(out)
	return out, nil
}

func optionalContent[S any](ctx context.Context, r *catalog.Resource[S], key catalog.Key) ([]byte, error) {
	data, err := r.GetContent(ctx, key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	return data, err
}
