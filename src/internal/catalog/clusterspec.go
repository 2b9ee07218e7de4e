package catalog

import "encoding/json"

// ClusterModePull is the mode of a cluster whose agent pulls its work
// (fleet mode): it is registered without a kubeconfig.
const ClusterModePull = "pull"

// ClusterSpec is a cluster's spec. A cluster registered with its
// kubeconfig has none; one in pull mode says so.
type ClusterSpec struct {
	Mode string `json:"mode,omitempty" bson:"mode,omitempty"`
	// GitOps is EMCO's GitOps cluster (Flux, Anthos, Azure Arc pulling
	// from a git repository), read only to be refused: Argus pulls
	// without a git server (pull mode).
	GitOps json.RawMessage `json:"gitOps,omitempty" bson:"-"`
}
