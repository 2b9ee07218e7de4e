package status

import (
	"context"
	"sort"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// The list queries (?apps, ?clusters, ?resources) answer in EMCO's shapes.

// ListHeader identifies what a list is about, as EMCO spells it.
type ListHeader struct {
	Project          string `json:"project,omitempty"`
	CompositeApp     string `json:"compositeApp,omitempty"`
	Version          string `json:"compositeAppVersion,omitempty"`
	CompositeProfile string `json:"compositeProfile,omitempty"`
	LogicalCloud     string `json:"logicalCloud,omitempty"`
	Name             string `json:"name,omitempty"`
}

// AppsList answers ?apps: the context's apps.
type AppsList struct {
	ListHeader
	Apps []string `json:"apps"`
}

// ClustersByApp answers ?clusters[&app=]: each app's clusters.
type ClustersByApp struct {
	ListHeader
	ClustersByApp []ClustersByAppEntry `json:"clustersByApp"`
}

// ClustersByAppEntry is one app's clusters.
type ClustersByAppEntry struct {
	App      string         `json:"app"`
	Clusters []ClusterEntry `json:"clusters"`
}

// ClusterEntry names a cluster.
type ClusterEntry struct {
	ClusterProvider string `json:"clusterProvider"`
	Cluster         string `json:"cluster"`
}

// ResourcesByApp answers ?resources[&app=][&cluster=][&type=]: the
// resources of each app on each cluster; with type=cluster (status=ready)
// the pods the cluster reports too.
type ResourcesByApp struct {
	ListHeader
	ResourcesByApp []ResourcesByAppEntry `json:"resourcesByApp"`
}

// ResourcesByAppEntry is one app's resources on one cluster.
type ResourcesByAppEntry struct {
	App             string          `json:"app"`
	ClusterProvider string          `json:"clusterProvider"`
	Cluster         string          `json:"cluster"`
	Resources       []ResourceEntry `json:"resources"`
}

// ResourceEntry names a resource.
type ResourceEntry struct {
	Name string `json:"name"`
	GVK  GVK    `json:"GVK"`
}

func listHeader(h Header, e EMCOHeader) ListHeader {
	return ListHeader{Project: h.Project, CompositeApp: h.CompositeApp, Version: h.Version, CompositeProfile: h.CompositeProfile,
		LogicalCloud: e.LogicalCloud, Name: h.Name}
}

// lists answers a list query for context id.
func (r *Reader) lists(ctx context.Context, header Header, st catalog.DIGState, id string, q Query) (any, error) {
	var out any
	err := r.withFilteredInput(ctx, header, st, id, q, func(in Input) { out = Lists(in, q) })
	return out, err
}

// Lists computes a list query's answer.
func Lists(in Input, q Query) any {
	h := listHeader(in.Header, in.EMCO)
	switch {
	case q.ListApps:
		out := AppsList{ListHeader: h, Apps: []string{}}
		if in.Context != nil {
			seen := map[string]bool{}
			for _, p := range in.Context.Placements {
				if !seen[p.App] && !left(p) {
					seen[p.App] = true
					out.Apps = append(out.Apps, p.App)
				}
			}
			sort.Strings(out.Apps)
		}
		return out
	case q.ListClusters:
		out := ClustersByApp{ListHeader: h, ClustersByApp: []ClustersByAppEntry{}}
		if in.Context == nil {
			return out
		}
		byApp := map[string]int{}
		for _, p := range in.Context.Placements { // sorted by app, then cluster
			if !match(q.Apps, p.App) || left(p) {
				continue
			}
			i, ok := byApp[p.App]
			if !ok {
				i = len(out.ClustersByApp)
				byApp[p.App] = i
				out.ClustersByApp = append(out.ClustersByApp, ClustersByAppEntry{App: p.App, Clusters: []ClusterEntry{}})
			}
			out.ClustersByApp[i].Clusters = append(out.ClustersByApp[i].Clusters, ClusterEntry{ClusterProvider: p.Cluster.Provider, Cluster: p.Cluster.Name})
		}
		return out
	default:
		out := ResourcesByApp{ListHeader: h, ResourcesByApp: []ResourcesByAppEntry{}}
		if in.Context == nil {
			return out
		}
		q.Output, q.Resources = OutputAll, nil
		inClusters := clusterMatcher(q.Clusters)
		for _, p := range in.Context.Placements {
			if !match(q.Apps, p.App) || !inClusters(p.Cluster) || left(p) {
				continue
			}
			e := ResourcesByAppEntry{App: p.App, ClusterProvider: p.Cluster.Provider, Cluster: p.Cluster.Name, Resources: []ResourceEntry{}}
			for _, res := range buildCluster(in, q, p, nil).Resources {
				e.Resources = append(e.Resources, ResourceEntry{Name: res.Name, GVK: res.GVK})
			}
			out.ResourcesByApp = append(out.ResourcesByApp, e)
		}
		return out
	}
}
