package logicalcloud

import (
	"context"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
)

// State is a logical cloud's lifecycle as its status reports it.
type State struct {
	Lifecycle catalog.DIGState
	Spec      catalog.LogicalCloudSpec
	// Context is the current context ("" before the first instantiation),
	// ContextStatus its status; Deployed is the cloud's deployedStatus,
	// which for a standard cloud waits for the users' certificates, and
	// Reason why it is not done.
	Context                         *appcontext.Context
	ContextStatus, Deployed, Reason string
	// References are the cloud's cluster references.
	References []catalog.Object[catalog.ClusterReferenceSpec]
}

// ContextReader reads a context (from etcd, or a cache of it).
type ContextReader func(ctx context.Context, id string) (*appcontext.Context, error)

// ReadState reads a logical cloud's state: the cloud, its lifecycle, its
// references and its current context.
func ReadState(ctx context.Context, cat *catalog.Catalog, contexts ContextReader, key catalog.Key) (State, error) {
	lc, err := catalog.For[catalog.LogicalCloudSpec](cat, catalog.LogicalClouds).Get(ctx, key)
	if err != nil {
		return State{}, err
	}
	st, err := cat.GetState(ctx, catalog.LogicalCloudGroup(key[0], key[1]))
	if err != nil {
		return State{}, err
	}
	refs, err := catalog.For[catalog.ClusterReferenceSpec](cat, catalog.ClusterReferences).List(ctx, key)
	if err != nil {
		return State{}, err
	}
	out := State{Lifecycle: st, Spec: lc.Spec, References: refs}
	if st.ContextID == "" {
		return out, nil
	}
	c, err := contexts(ctx, st.ContextID)
	if err != nil {
		return out, err
	}
	out.Context, out.ContextStatus = c, c.Status.Status
	placed := map[appcontext.ClusterRef]bool{}
	for _, p := range c.Placements {
		placed[p.Cluster] = true
	}
	var inContext []catalog.ClusterReferenceSpec
	for _, r := range refs {
		if placed[appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}] {
			inContext = append(inContext, r.Spec)
		}
	}
	out.Deployed, out.Reason = DeployedStatus(out.ContextStatus, lc.Spec, inContext)
	return out, nil
}
