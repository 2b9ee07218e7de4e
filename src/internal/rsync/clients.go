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
