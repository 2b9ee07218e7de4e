package catalog

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
)

// The EMCO kinds beyond the orchestrator's core: the controller registries,
// dcm's logical clouds and the generic action controller's intents.
var (
	// Controllers is the orchestrator's registry (/v2/controllers);
	// DTCControllers and CLMControllers are the registries of the dtc and
	// clm services, which EMCO examples fill too. Argus only records them.
	Controllers    = &Kind{Name: "controller", Collection: "controllers"}
	DTCControllers = &Kind{Name: "dtc controller", Collection: "dtccontrollers"}
	CLMControllers = &Kind{Name: "clm controller", Collection: "clmcontrollers"}

	LogicalClouds     = &Kind{Name: "logical cloud", Collection: "logicalclouds", Parent: Projects}
	ClusterReferences = &Kind{Name: "cluster reference", Collection: "clusterreferences", Parent: LogicalClouds}
	UserPermissions   = &Kind{Name: "user permission", Collection: "userpermissions", Parent: LogicalClouds}
	ClusterQuotas     = &Kind{Name: "cluster quota", Collection: "clusterquotas", Parent: LogicalClouds}

	GenericK8sIntents = &Kind{Name: "generic k8s intent", Collection: "generick8sintents", Parent: DeploymentIntentGroups}

	// AppDependencies order an app after others (orchestrator); the kv
	// pairs are clm's per cluster and dcm's per logical cloud.
	AppDependencies     = &Kind{Name: "app dependency", Collection: "appdependencies", Parent: Apps}
	ClusterKvPairs      = &Kind{Name: "cluster kv pair", Collection: "clusterkvpairs", Parent: Clusters}
	LogicalCloudKvPairs = &Kind{Name: "logical cloud kv pair", Collection: "logicalcloudkvpairs", Parent: LogicalClouds}
	GACResources        = &Kind{Name: "generic resource", Collection: "gacresources", Parent: GenericK8sIntents}
	GACCustomizations   = &Kind{Name: "customization", Collection: "gaccustomizations", Parent: GACResources}
)

// EMCOKinds lists the kinds above, parents before children.
func EMCOKinds() []*Kind {
	return []*Kind{Controllers, DTCControllers, CLMControllers,
		LogicalClouds, ClusterReferences, UserPermissions, ClusterQuotas,
		GenericK8sIntents, GACResources, GACCustomizations,
		AppDependencies, ClusterKvPairs, LogicalCloudKvPairs}
}

// Dependency operational states: an app waits until the app it depends
// on is Deployed (every resource applied) or Ready (every resource Ready)
// on the cluster.
const (
	OpStatusDeployed = "Deployed"
	OpStatusReady    = "Ready"
)

// AppDependencySpec makes the app wait for another (EMCO's shape).
type AppDependencySpec struct {
	App      string `json:"app,omitempty" bson:"app"`
	OpStatus string `json:"opStatus,omitempty" bson:"opStatus"`
	// Wait is how many seconds to wait once OpStatus is reached.
	Wait int `json:"wait,omitempty" bson:"wait,omitempty"`
}

// KvPairsSpec is a list of key-value maps kept for other controllers
// (clm's cluster kv-pairs, dcm's logical cloud kv-pairs).
type KvPairsSpec struct {
	Kv KvList `json:"kv" bson:"kv"`
}

// KvList is a list of key-value maps. In JSON it is a list of objects, as
// EMCO has it; in the document store each map is wrapped in a document,
// since FerretDB stores no arrays directly inside arrays.
type KvList []StringMap

type kvDoc struct {
	M StringMap `bson:"m"`
}

// MarshalBSONValue stores the list as [{m: map}, ...].
func (l KvList) MarshalBSONValue() (bsontype.Type, []byte, error) {
	if l == nil {
		return bson.TypeNull, nil, nil
	}
	docs := make([]kvDoc, len(l))
	for i, m := range l {
		docs[i] = kvDoc{M: m}
	}
	return bson.MarshalValue(docs)
}

// UnmarshalBSONValue reads the list back.
func (l *KvList) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	if t == bson.TypeNull || t == bson.TypeUndefined {
		*l = nil
		return nil
	}
	var docs []kvDoc
	if err := bson.UnmarshalValue(t, data, &docs); err != nil {
		return fmt.Errorf("kv list: %w", err)
	}
	out := make(KvList, len(docs))
	for i, d := range docs {
		out[i] = d.M
	}
	*l = out
	return nil
}

// Controller types (EMCO: an action controller edits the AppContext, a
// placement controller chooses clusters).
const (
	ControllerTypeAction    = "action"
	ControllerTypePlacement = "placement"
)

// ControllerSpec is where a controller listens and how it is ordered.
// Argus never dials it: the built-in controllers run in-process.
type ControllerSpec struct {
	Host     string `json:"host" bson:"host"`
	Port     int    `json:"port" bson:"port"`
	Type     string `json:"type" bson:"type"`
	Priority int    `json:"priority" bson:"priority"`
}

// Logical cloud levels: 0 is the clusters as they are (admin), 1 a
// namespace per cluster with its own user (standard or privileged).
const (
	LevelAdmin    = "0"
	LevelStandard = "1"
)

// LogicalCloudSpec is a dcm logical cloud.
type LogicalCloudSpec struct {
	Namespace string           `json:"namespace" bson:"namespace"`
	Labels    StringMap        `json:"labels,omitempty" bson:"labels,omitempty"`
	Level     string           `json:"level" bson:"level"`
	User      LogicalCloudUser `json:"user" bson:"user"`
}

// LogicalCloudUser is the identity a standard cloud's resources are
// applied with.
type LogicalCloudUser struct {
	UserName string `json:"userName" bson:"userName"`
	Type     string `json:"type" bson:"type"`
}

// ClusterReferenceSpec puts a cluster into a logical cloud. Certificate is
// the user's client certificate the cluster issued (base64 of the PEM, as
// EMCO keeps it) and CertificateError why it could not; both are set by
// Argus, never by the caller.
type ClusterReferenceSpec struct {
	ClusterProvider  string `json:"clusterProvider" bson:"clusterProvider"`
	Cluster          string `json:"cluster" bson:"cluster"`
	LoadBalancerIP   string `json:"loadBalancerIP" bson:"loadBalancerIP"`
	Certificate      string `json:"certificate" bson:"certificate"`
	CertificateError string `json:"certificateError,omitempty" bson:"certificateError,omitempty"`
}

// UserPermissionSpec becomes a Role (or, without a namespace, a
// ClusterRole) and its binding to the cloud's user.
type UserPermissionSpec struct {
	Namespace string   `json:"namespace" bson:"namespace"`
	APIGroups []string `json:"apiGroups" bson:"apiGroups"`
	Resources []string `json:"resources" bson:"resources"`
	Verbs     []string `json:"verbs" bson:"verbs"`
}

// ClusterQuotaSpec is a ResourceQuota's spec.hard ("limits.cpu": "2").
type ClusterQuotaSpec = StringMap

// GACResourceSpec is a generic action controller resource: a new object
// (from the uploaded file) or an object an app already renders.
type GACResourceSpec struct {
	App         string      `json:"app" bson:"app"`
	NewObject   string      `json:"newObject" bson:"newObject"`
	ResourceGVK ResourceGVK `json:"resourceGVK" bson:"resourceGVK"`
}

// IsNew reports whether the resource is a new object ("true", any case).
func (s GACResourceSpec) IsNew() bool { return strings.EqualFold(s.NewObject, "true") }

// ResourceGVK names the object a GAC resource is about.
type ResourceGVK struct {
	APIVersion string `json:"apiVersion" bson:"apiVersion"`
	Kind       string `json:"kind" bson:"kind"`
	Name       string `json:"name" bson:"name"`
}

// CustomizationSpec says on which clusters and how a GAC resource is
// changed.
type CustomizationSpec struct {
	ClusterSpecific  string         `json:"clusterSpecific" bson:"clusterSpecific"`
	ClusterInfo      ClusterInfo    `json:"clusterInfo" bson:"clusterInfo"`
	PatchType        string         `json:"patchType,omitempty" bson:"patchType,omitempty"`
	PatchJSON        JSONValue      `json:"patchJson,omitempty" bson:"patchJson,omitempty"`
	ConfigMapOptions DataKeyOptions `json:"configMapOptions,omitzero" bson:"configMapOptions,omitempty"`
	SecretOptions    DataKeyOptions `json:"secretOptions,omitzero" bson:"secretOptions,omitempty"`
}

// IsClusterSpecific reports whether ClusterInfo selects the clusters ("true",
// any case); otherwise the customization applies on every cluster of the app.
func (s CustomizationSpec) IsClusterSpecific() bool {
	return strings.EqualFold(s.ClusterSpecific, "true")
}

// ClusterInfo selects clusters by label or name; mode allow keeps the
// matching ones, deny the others.
type ClusterInfo struct {
	Scope           string `json:"scope" bson:"scope"`
	ClusterProvider string `json:"clusterProvider" bson:"clusterProvider"`
	Cluster         string `json:"cluster" bson:"cluster"`
	ClusterLabel    string `json:"clusterLabel" bson:"clusterLabel"`
	Mode            string `json:"mode" bson:"mode"`
}

// DataKeyOptions maps uploaded file names to ConfigMap/Secret data keys,
// or marks a file as a merge patch.
type DataKeyOptions struct {
	DataKeyOptions []KeyOption `json:"dataKeyOptions,omitempty" bson:"dataKeyOptions,omitempty"`
}

// KeyOption is one file's key name, or "mergePatch": "true".
type KeyOption struct {
	FileName   string `json:"fileName,omitempty" bson:"fileName,omitempty"`
	KeyName    string `json:"keyName,omitempty" bson:"keyName,omitempty"`
	MergePatch string `json:"mergePatch,omitempty" bson:"mergePatch,omitempty"`
}

// File is one uploaded file of a multi-file upload (GAC customizations).
type File struct {
	Name    string `json:"name"`
	Content []byte `json:"content"`
}

// JSONValue is caller-given JSON kept verbatim (a JSON patch, whose values
// may be objects with any keys); it is stored as a string.
type JSONValue json.RawMessage

// MarshalJSON writes the value as given.
func (v JSONValue) MarshalJSON() ([]byte, error) {
	if len(v) == 0 {
		return []byte("null"), nil
	}
	return v, nil
}

// UnmarshalJSON keeps a copy of the value.
func (v *JSONValue) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*v = nil
		return nil
	}
	*v = append((*v)[:0], data...)
	return nil
}

// MarshalBSONValue stores the JSON text as a string.
func (v JSONValue) MarshalBSONValue() (bsontype.Type, []byte, error) {
	return bson.MarshalValue(string(v))
}

// UnmarshalBSONValue reads the JSON text back.
func (v *JSONValue) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	if t == bson.TypeNull || t == bson.TypeUndefined {
		*v = nil
		return nil
	}
	var s string
	if err := bson.UnmarshalValue(t, data, &s); err != nil {
		return fmt.Errorf("json value: %w", err)
	}
	*v = JSONValue(s)
	return nil
}
