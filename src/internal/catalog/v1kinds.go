package catalog

import (
	"encoding/json"
	"fmt"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/bsontype"
)

// The v1 (k8splugin) kinds. A definition's profiles and config templates
// go with it (k8splugin deletes the default profile with its definition;
// Argus deletes the others too rather than leave them orphaned), an
// instance's configs with the instance.
var (
	ConnectivityInfos = &Kind{Name: "cloud region", Collection: "connectivity"}
	RBDefinitions     = &Kind{Name: "rb definition", Collection: "rbdefinitions", Own: []string{"rbname", "rbversion"}}
	RBProfiles        = &Kind{Name: "rb profile", Collection: "rbprofiles", Parent: RBDefinitions, Cascade: true}
	ConfigTemplates   = &Kind{Name: "config template", Collection: "rbconfigtemplates", Parent: RBDefinitions, Cascade: true}
	Instances         = &Kind{Name: "instance", Collection: "instances"}
	InstanceConfigs   = &Kind{Name: "config", Collection: "instanceconfigs", Parent: Instances, Cascade: true}
)

// V1Kinds lists every v1 kind, parents before children.
func V1Kinds() []*Kind {
	return []*Kind{ConnectivityInfos, RBDefinitions, RBProfiles, ConfigTemplates, Instances, InstanceConfigs}
}

// AllKinds is every kind of the catalogue.
func AllKinds() []*Kind {
	return append(append(V2Kinds(), V1Kinds()...), SubscriptionKinds()...)
}

// DefaultProfile is the profile k8splugin creates with every definition:
// namespace and release name "default", no values.
const DefaultProfile = "default"

// ConnectivitySpec is a cloud region's connectivity info (the kubeconfig is
// its uploaded content).
type ConnectivitySpec struct {
	CloudRegion string              `json:"cloud-region" bson:"cloudRegion"`
	CloudOwner  string              `json:"cloud-owner" bson:"cloudOwner"`
	Other       ConnectivityRecords `json:"other-connectivity-list" bson:"other"`
}

// ConnectivityRecords is k8splugin's other-connectivity-list: named
// records (an OVN server's address and credentials, say) kept as given.
type ConnectivityRecords struct {
	Records []map[string]string `json:"connectivity-records"`
}

// MarshalBSONValue stores the records as JSON text: their keys are the
// client's and may hold dots, which MongoDB field names must not.
func (c ConnectivityRecords) MarshalBSONValue() (bsontype.Type, []byte, error) {
	return jsonAsBSON(c)
}

// UnmarshalBSONValue reads what MarshalBSONValue wrote.
func (c *ConnectivityRecords) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	return jsonFromBSON(t, data, c)
}

// Labels are a client's labels (keys such as "app.kubernetes.io/name"),
// stored as JSON text for the same reason.
type Labels map[string]string

// MarshalBSONValue stores the labels as JSON text.
func (l Labels) MarshalBSONValue() (bsontype.Type, []byte, error) { return jsonAsBSON(l) }

// UnmarshalBSONValue reads what MarshalBSONValue wrote.
func (l *Labels) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	return jsonFromBSON(t, data, l)
}

// Values is a JSON object stored as JSON text, for the same reason.
type Values map[string]any

// MarshalBSONValue stores the values as JSON text.
func (v Values) MarshalBSONValue() (bsontype.Type, []byte, error) { return jsonAsBSON(v) }

// UnmarshalBSONValue reads what MarshalBSONValue wrote.
func (v *Values) UnmarshalBSONValue(t bsontype.Type, data []byte) error {
	return jsonFromBSON(t, data, v)
}

func jsonAsBSON(v any) (bsontype.Type, []byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return 0, nil, err
	}
	return bson.MarshalValue(string(js))
}

func jsonFromBSON(t bsontype.Type, data []byte, v any) error {
	switch t {
	case bson.TypeNull, bson.TypeUndefined:
		return nil
	case bson.TypeEmbeddedDocument:
		// Stored before it was JSON text, as a subdocument: read it as the
		// JSON API would have given it.
		var m bson.M
		if err := bson.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("decode stored JSON: %w", err)
		}
		js, err := bson.MarshalExtJSON(m, false, false)
		if err != nil {
			return fmt.Errorf("decode stored JSON: %w", err)
		}
		return json.Unmarshal(js, v)
	}
	var s string
	if err := bson.UnmarshalValue(t, data, &s); err != nil {
		return fmt.Errorf("decode stored JSON: %w", err)
	}
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), v)
}

// RBDefinitionSpec is a resource bundle definition (the chart is its content).
type RBDefinitionSpec struct {
	RBName      string `json:"rb-name" bson:"rbName"`
	RBVersion   string `json:"rb-version" bson:"rbVersion"`
	ChartName   string `json:"chart-name" bson:"chartName"`
	Description string `json:"description" bson:"description"`
	Labels      Labels `json:"labels" bson:"labels"`
}

// GVK is k8splugin's spelling of a group/version/kind.
type GVK struct {
	Group   string `json:"Group" bson:"group"`
	Version string `json:"Version" bson:"version"`
	Kind    string `json:"Kind" bson:"kind"`
}

// RBProfileSpec is a resource bundle profile (the profile .tgz is its content).
type RBProfileSpec struct {
	RBName             string `json:"rb-name" bson:"rbName"`
	RBVersion          string `json:"rb-version" bson:"rbVersion"`
	ProfileName        string `json:"profile-name" bson:"profileName"`
	ReleaseName        string `json:"release-name" bson:"releaseName"`
	Namespace          string `json:"namespace" bson:"namespace"`
	KubernetesVersion  string `json:"kubernetes-version" bson:"kubernetesVersion"`
	Labels             Labels `json:"labels" bson:"labels"`
	ExtraResourceTypes []GVK  `json:"extra-resource-types" bson:"extraResourceTypes,omitempty"`
}

// ConfigTemplateSpec is a definition's config template: a chart rendered
// with a config's values (its uploaded content), or, without content, the
// definition's own chart.
type ConfigTemplateSpec struct {
	TemplateName string `json:"template-name" bson:"templateName"`
	Description  string `json:"description" bson:"description"`
	ChartName    string `json:"chart-name" bson:"chartName"`
	HasContent   bool   `json:"has-content" bson:"hasContent"`
}

// InstanceRequest is the body of POST /v1/instance and of an upgrade.
type InstanceRequest struct {
	RBName         string    `json:"rb-name" bson:"rbName"`
	RBVersion      string    `json:"rb-version" bson:"rbVersion"`
	ProfileName    string    `json:"profile-name" bson:"profileName"`
	CloudRegion    string    `json:"cloud-region" bson:"cloudRegion"`
	ReleaseName    string    `json:"release-name" bson:"releaseName,omitempty"`
	Labels         Labels    `json:"labels" bson:"labels,omitempty"`
	OverrideValues StringMap `json:"override-values" bson:"overrideValues,omitempty"`
	// FieldValidation (an Argus addition): Strict, Warn or Ignore; "" is
	// the orchestrator's --field-validation.
	FieldValidation string `json:"field-validation,omitempty" bson:"fieldValidation,omitempty"`
	// SyncPolicy (an Argus addition): self-heal and adoption, as a DIG's
	// spec.syncPolicy.
	SyncPolicy *V1SyncPolicy `json:"sync-policy,omitempty" bson:"syncPolicy,omitempty"`
}

// V1SyncPolicy is SyncPolicy in the v1 API's spelling.
type V1SyncPolicy struct {
	SelfHeal bool `json:"self-heal,omitempty" bson:"selfHeal,omitempty"`
	Adopt    bool `json:"adopt,omitempty" bson:"adopt,omitempty"`
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

// ConfigContent is a config as k8splugin's clients write it.
type ConfigContent struct {
	ConfigName   string `json:"config-name" bson:"configName"`
	TemplateName string `json:"template-name" bson:"templateName"`
	Description  string `json:"description" bson:"description"`
	Values       Values `json:"values" bson:"values"`
}

// Config actions, as k8splugin records them in a config's history.
const (
	ConfigCreated = "POST"
	ConfigUpdated = "PUT"
	ConfigDeleted = "DELETE"
)

// ConfigVersion is one step of a config's history: the action and the
// content it left. Version n is History[n-1].
type ConfigVersion struct {
	Action  string        `json:"action" bson:"action"`
	Content ConfigContent `json:"content" bson:"content"`
}

// ConfigTag names a version.
type ConfigTag struct {
	Version uint   `json:"config-version" bson:"version"`
	Tag     string `json:"config-tag" bson:"tag"`
}

// InstanceConfigSpec is a stored config of an instance: its history and
// tags. The current version is the last; a config whose last action is
// DELETE has no resources on the cluster.
type InstanceConfigSpec struct {
	History []ConfigVersion `json:"history" bson:"history"`
	Tags    []ConfigTag     `json:"tags,omitempty" bson:"tags,omitempty"`
}

// Current is the config's current version (0 when it has none).
func (c InstanceConfigSpec) Current() uint { return uint(len(c.History)) }

// Active reports whether the config's resources belong on the cluster.
func (c InstanceConfigSpec) Active() bool {
	return len(c.History) > 0 && c.History[len(c.History)-1].Action != ConfigDeleted
}
