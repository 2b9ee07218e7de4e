package catalog

// The v1 (k8splugin) kinds.
var (
	ConnectivityInfos = &Kind{Name: "cloud region", Collection: "connectivity"}
	RBDefinitions     = &Kind{Name: "rb definition", Collection: "rbdefinitions", Own: []string{"rbname", "rbversion"}}
	RBProfiles        = &Kind{Name: "rb profile", Collection: "rbprofiles", Parent: RBDefinitions}
	Instances         = &Kind{Name: "instance", Collection: "instances"}
)

// V1Kinds lists every v1 kind, parents before children.
func V1Kinds() []*Kind { return []*Kind{ConnectivityInfos, RBDefinitions, RBProfiles, Instances} }

// AllKinds is every kind of the catalogue.
func AllKinds() []*Kind {
	return append(append(V2Kinds(), V1Kinds()...), SubscriptionKinds()...)
}

// ConnectivitySpec is a cloud region's connectivity info (the kubeconfig is
// its uploaded content).
type ConnectivitySpec struct {
	CloudRegion string   `json:"cloud-region" bson:"cloudRegion"`
	CloudOwner  string   `json:"cloud-owner" bson:"cloudOwner"`
	Other       Document `json:"other-connectivity-list,omitempty" bson:"other,omitempty"`
}

// RBDefinitionSpec is a resource bundle definition (the chart is its content).
type RBDefinitionSpec struct {
	RBName      string    `json:"rb-name" bson:"rbName"`
	RBVersion   string    `json:"rb-version" bson:"rbVersion"`
	ChartName   string    `json:"chart-name" bson:"chartName"`
	Description string    `json:"description" bson:"description"`
	Labels      StringMap `json:"labels" bson:"labels"`
}

// GVK is k8splugin's spelling of a group/version/kind.
type GVK struct {
	Group   string `json:"Group" bson:"group"`
	Version string `json:"Version" bson:"version"`
	Kind    string `json:"Kind" bson:"kind"`
}

// RBProfileSpec is a resource bundle profile (the profile .tgz is its content).
type RBProfileSpec struct {
	RBName             string    `json:"rb-name" bson:"rbName"`
	RBVersion          string    `json:"rb-version" bson:"rbVersion"`
	ProfileName        string    `json:"profile-name" bson:"profileName"`
	ReleaseName        string    `json:"release-name" bson:"releaseName"`
	Namespace          string    `json:"namespace" bson:"namespace"`
	KubernetesVersion  string    `json:"kubernetes-version" bson:"kubernetesVersion"`
	Labels             StringMap `json:"labels" bson:"labels"`
	ExtraResourceTypes []GVK     `json:"extra-resource-types,omitempty" bson:"extraResourceTypes,omitempty"`
}

// InstanceRequest is the body of POST /v1/instance and of an upgrade.
type InstanceRequest struct {
	RBName         string    `json:"rb-name" bson:"rbName"`
	RBVersion      string    `json:"rb-version" bson:"rbVersion"`
	ProfileName    string    `json:"profile-name" bson:"profileName"`
	CloudRegion    string    `json:"cloud-region" bson:"cloudRegion"`
	ReleaseName    string    `json:"release-name,omitempty" bson:"releaseName,omitempty"`
	Labels         StringMap `json:"labels,omitempty" bson:"labels,omitempty"`
	OverrideValues StringMap `json:"override-values,omitempty" bson:"overrideValues,omitempty"`
}

// ResourceRef names one resource of an instance.
type ResourceRef struct {
	GVK  GVK    `json:"GVK" bson:"gvk"`
	Name string `json:"Name" bson:"name"`
}

// InstanceSpec is a stored instance.
type InstanceSpec struct {
	ID          string          `json:"id" bson:"id"`
	Request     InstanceRequest `json:"request" bson:"request"`
	Namespace   string          `json:"namespace" bson:"namespace"`
	ReleaseName string          `json:"release-name" bson:"releaseName"`
	Resources   []ResourceRef   `json:"resources" bson:"resources"`
}

// InstanceGroup is the lifecycle and change-routing group of a v1 instance.
func InstanceGroup(id string) string { return "instance:" + id }
