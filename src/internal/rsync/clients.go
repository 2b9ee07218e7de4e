package rsync

import (
	"context"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
)

// clientFor is the client a context's resources are applied with on a
// cluster: the logical cloud's credentials when the context names one (a
// standard cloud's user is confined to its namespace), else the cluster's.
func (e *Engine) clientFor(ctx context.Context, c *appcontext.Context, ref appcontext.ClusterRef) (*cluster.Client, error) {
	if c.Meta.LogicalCloud == "" {
		return e.opts.Clusters.Client(ctx, ref)
	}
	return e.opts.Clusters.CloudClient(ctx, ref, cluster.Cloud{Project: c.Meta.Project, Name: c.Meta.LogicalCloud})
}

// bundleClient is the client a context's ResourceBundleState is written
// with when its own (a logical cloud user's) is refused: the cluster's,
// which also applied the cloud's namespace and roles. The bundle is
// Argus's bookkeeping, not the user's resource, so a cloud whose
// permissions leave out k8splugin.io still gets its status. nil when the
// context has no cloud (its client is the cluster's already).
func (e *Engine) bundleClient(ctx context.Context, c *appcontext.Context, ref appcontext.ClusterRef) (*cluster.Client, error) {
	if c.Meta.LogicalCloud == "" {
		return nil, nil
	}
	return e.opts.Clusters.Client(ctx, ref)
}
