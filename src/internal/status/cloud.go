package status

import (
	"context"
	"encoding/json"
	"io"
	"net/url"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
)

// CloudResponse is a logical cloud's status (EMCO's LogicalCloudStatus):
// the status answer with the clusters of the cloud's pseudo-app
// "logical-cloud" at the top instead of apps.
type CloudResponse struct {
	Response
	Clusters []Cluster `json:"clusters,omitempty"`
}

// LogicalCloud answers GET /v2/projects/{p}/logical-clouds/{lc}/status.
// Without type or status it answers type=cluster (EMCO: status=ready);
// deployedStatus is the cloud's, which for a standard cloud waits for
// every cluster to issue its user's certificate.
func (r *Reader) LogicalCloud(ctx context.Context, key catalog.Key, v url.Values) (any, error) {
	q, err := ParseQuery(v)
	if err != nil {
		return nil, err
	}
	if !q.typeGiven {
		q.Type = TypeCluster
	}
	st, err := logicalcloud.ReadState(ctx, r.Catalog, r.Contexts.Get, key)
	if err != nil {
		return nil, err
	}
	if q.ListInstances {
		return Instances{Name: key[1], Project: key[0], Instances: append([]string{}, st.Lifecycle.Contexts...)}, nil
	}
	id, err := pickInstance(st.Lifecycle, q, "logical cloud")
	if err != nil {
		return nil, err
	}
	header, emco := Header{Project: key[0], Name: key[1]}, EMCOHeader{LogicalCloud: key[1]}
	if q.ListApps || q.ListClusters || q.ListResources {
		var out any
		err := r.withInputE(ctx, header, emco, st.Lifecycle, id, func(in Input) { out = Lists(in, q) })
		return out, err
	}
	var resp Response
	if err := r.withInputE(ctx, header, emco, st.Lifecycle, id, func(in Input) { resp = Build(in, q) }); err != nil {
		return nil, err
	}
	resp.contextID, resp.manifests = id, r.Manifests
	if err := resp.Resolve(ctx); err != nil { // a cloud has a handful of resources
		return nil, err
	}
	out := CloudResponse{Response: resp}
	if id == st.Lifecycle.ContextID && st.Deployed != "" {
		out.Status, out.DeployedStatus = st.Deployed, st.Deployed
	}
	if len(out.Apps) > 0 {
		out.Clusters, out.Apps = out.Apps[0].Clusters, nil
	} else if q.Type == TypeCluster && (out.DeployedStatus == appcontext.Instantiated || out.DeployedStatus == appcontext.Updated) {
		// An admin cloud puts nothing on its clusters: deployed is ready.
		out.ReadyStatusEMCO, out.Ready = EMCOReady, boolPtr(true)
	}
	return out, nil
}

// WriteJSON writes the answer whole (a cloud has a handful of resources,
// resolved already); it keeps Response's streaming, which knows nothing of
// Clusters, from being promoted.
func (c CloudResponse) WriteJSON(_ context.Context, w io.Writer) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
