package deploy

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// NetworkApp is the pseudo-app under which a cluster's network intents are
// deployed and reported.
const NetworkApp = "network-intents"

// NetworkGroupVersion is the API of the ncm network custom resources.
func NetworkGroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: "k8s.plugin.opnfv.org", Version: "v1alpha1"}
}

// ApplyNetworks renders the cluster's networks and provider networks to
// their custom resources and applies them to the cluster.
func (s *Service) ApplyNetworks(ctx context.Context, provider, clusterName string) (string, error) {
	cat := s.opts.Catalog
	ckey := catalog.Key{provider, clusterName}
	if _, err := catalog.For[catalog.Empty](cat, catalog.Clusters).Get(ctx, ckey); err != nil {
		return "", err
	}
	var resources []appcontext.Resource
	for _, k := range []struct {
		kind *catalog.Kind
		name string
	}{{catalog.Networks, "Network"}, {catalog.ProviderNetworks, "ProviderNetwork"}} {
		list, err := catalog.For[catalog.NetworkSpec](cat, k.kind).List(ctx, ckey)
		if err != nil {
			return "", err
		}
		for _, n := range list {
			gvk := NetworkGroupVersion().WithKind(k.name)
			obj := map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind,
				"metadata": map[string]any{"name": n.Metadata.Name}, "spec": map[string]any(n.Spec)}
			manifest, err := json.Marshal(obj)
			if err != nil {
				return "", err
			}
			resources = append(resources, appcontext.Resource{GVK: gvk, Name: n.Metadata.Name, Manifest: manifest})
		}
	}
	if len(resources) == 0 {
		return "", errdefs.Invalid("cluster %s+%s has no networks or provider networks to apply", provider, clusterName)
	}
	group := catalog.ClusterGroup(provider, clusterName)
	from := []string{catalog.StateCreated, catalog.StateTerminated}
	id := appcontext.NewID()
	if _, err := cat.Transition(ctx, group, "the cluster's network intents", from, s.action(catalog.StateApplied, id), id); err != nil {
		return "", err
	}
	meta := appcontext.Meta{ID: id, Kind: "network", Group: group, Namespace: Namespace, StatusID: id, Created: s.opts.Now()}
	p := &appcontext.Placement{App: NetworkApp, Cluster: appcontext.ClusterRef{Provider: provider, Name: clusterName}, Resources: resources}
	if err := s.opts.Contexts.Create(ctx, meta, appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()}, []*appcontext.Placement{p}); err != nil {
		return "", err
	}
	s.opts.Rsync.Instantiate(group, id)
	return id, nil
}

// TerminateNetworks deletes the cluster's applied network intents.
func (s *Service) TerminateNetworks(ctx context.Context, provider, clusterName string) error {
	if _, err := catalog.For[catalog.Empty](s.opts.Catalog, catalog.Clusters).Get(ctx, catalog.Key{provider, clusterName}); err != nil {
		return err
	}
	group := catalog.ClusterGroup(provider, clusterName)
	cur, err := s.opts.Catalog.GetState(ctx, group)
	if err != nil {
		return err
	}
	st, err := s.opts.Catalog.Transition(ctx, group, "the cluster's network intents", []string{catalog.StateApplied}, s.action(catalog.StateTerminated, cur.ContextID), "")
	if err != nil {
		return err
	}
	s.opts.Rsync.Terminate(group, st.ContextID)
	return nil
}
