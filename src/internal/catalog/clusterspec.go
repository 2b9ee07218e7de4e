package catalog

// ClusterModePull is the mode of a cluster whose agent pulls its work
// (fleet mode): it is registered without a kubeconfig.
const ClusterModePull = "pull"

// ClusterSpec is a cluster's spec. A cluster registered with its
// kubeconfig has none; one in pull mode says so.
type ClusterSpec struct {
	Mode string `json:"mode,omitempty" bson:"mode,omitempty"`
}
