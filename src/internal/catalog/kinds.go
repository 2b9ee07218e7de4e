package catalog

// The v2 (EMCO) kinds, outermost first. Key fields are named after the kind
// (spaces dropped): a cluster is keyed by {clusterprovider, cluster}.
var (
	ClusterProviders = &Kind{Name: "cluster provider", Collection: "clusterproviders"}
	Clusters         = &Kind{Name: "cluster", Collection: "clusters", Parent: ClusterProviders}
	ClusterLabels    = &Kind{Name: "cluster label", Collection: "clusterlabels", Parent: Clusters}
	Networks         = &Kind{Name: "network", Collection: "networks", Parent: Clusters}
	ProviderNetworks = &Kind{Name: "provider network", Collection: "providernetworks", Parent: Clusters}

	Projects      = &Kind{Name: "project", Collection: "projects"}
	CompositeApps = &Kind{Name: "composite app", Collection: "compositeapps", Parent: Projects,
		Own: []string{"compositeapp", "version"}}
	Apps                    = &Kind{Name: "app", Collection: "apps", Parent: CompositeApps}
	CompositeProfiles       = &Kind{Name: "composite profile", Collection: "compositeprofiles", Parent: CompositeApps}
	AppProfiles             = &Kind{Name: "profile", Collection: "appprofiles", Parent: CompositeProfiles}
	DeploymentIntentGroups  = &Kind{Name: "deployment intent group", Collection: "digs", Parent: CompositeApps}
	GenericPlacementIntents = &Kind{Name: "generic placement intent", Collection: "gpis", Parent: DeploymentIntentGroups}
	AppIntents              = &Kind{Name: "app intent", Collection: "appintents", Parent: GenericPlacementIntents}
	DIGIntents              = &Kind{Name: "intent", Collection: "digintents", Parent: DeploymentIntentGroups}
)

// V2Kinds lists every v2 kind, parents before children.
func V2Kinds() []*Kind {
	return append([]*Kind{ClusterProviders, Clusters, ClusterLabels, Networks, ProviderNetworks,
		Projects, CompositeApps, Apps, CompositeProfiles, AppProfiles,
		DeploymentIntentGroups, GenericPlacementIntents, AppIntents, DIGIntents}, EMCOKinds()...)
}

// Empty is the spec of kinds that are metadata only (projects, providers,
// clusters, composite profiles, generic placement intents).
type Empty struct{}

// CompositeAppSpec names the version; it is part of the key.
type CompositeAppSpec struct {
	Version string `json:"compositeAppVersion" bson:"compositeAppVersion"`
}

// AppProfileSpec names the app a profile is for.
type AppProfileSpec struct {
	App string `json:"app" bson:"app"`
}

// DIGSpec is a deployment intent group's spec (EMCO 22.x).
type DIGSpec struct {
	CompositeProfile string          `json:"compositeProfile" bson:"compositeProfile"`
	Version          string          `json:"version" bson:"version"`
	LogicalCloud     string          `json:"logicalCloud,omitempty" bson:"logicalCloud,omitempty"`
	OverrideValues   []OverrideValue `json:"overrideValues,omitempty" bson:"overrideValues,omitempty"`
	// FieldValidation (an Argus addition) is how the clusters treat fields
	// a kind's schema lacks: Strict, Warn or Ignore; "" is the
	// orchestrator's --field-validation.
	FieldValidation string `json:"fieldValidation,omitempty" bson:"fieldValidation,omitempty"`
	// SyncPolicy (an Argus addition) is what Argus does about drift and
	// about objects it finds in its way; a PUT changes it at once for an
	// instantiated DIG.
	SyncPolicy *SyncPolicy `json:"syncPolicy,omitempty" bson:"syncPolicy,omitempty"`
}

// SyncPolicy: SelfHeal re-applies what drifted without being asked (off
// by default, as in Argo CD); Adopt lets rsync take over existing objects
// that carry the annotation argus.io/adopt: "true".
type SyncPolicy struct {
	SelfHeal bool `json:"selfHeal,omitempty" bson:"selfHeal,omitempty"`
	Adopt    bool `json:"adopt,omitempty" bson:"adopt,omitempty"`
}

// OverrideValue sets values for one app with Helm --set keys
// ("image.repository": "x").
type OverrideValue struct {
	App    string    `json:"app" bson:"app"`
	Values StringMap `json:"values" bson:"values"`
}

// AppIntentSpec places one app.
type AppIntentSpec struct {
	App    string          `json:"app" bson:"app"`
	Intent PlacementIntent `json:"intent" bson:"intent"`
}

// PlacementIntent: every allOf entry and at least one anyOf entry (when any
// are given).
type PlacementIntent struct {
	AllOf []ClusterSelector `json:"allOf,omitempty" bson:"allOf,omitempty"`
	AnyOf []ClusterSelector `json:"anyOf,omitempty" bson:"anyOf,omitempty"`
}

// ClusterSelector names a cluster, or the clusters with a label, of a provider.
type ClusterSelector struct {
	ClusterProvider string `json:"clusterProvider" bson:"clusterProvider"`
	Cluster         string `json:"cluster,omitempty" bson:"cluster,omitempty"`
	ClusterLabel    string `json:"clusterLabel,omitempty" bson:"clusterLabel,omitempty"`
}

// DIGIntentSpec maps intent types (controller names: genericPlacementIntent,
// gac, ...) to intent names.
type DIGIntentSpec struct {
	Intent map[string]string `json:"intent" bson:"intent"`
}

// NetworkSpec is an ncm network or provider network, kept as given and
// rendered into the CR's spec.
type NetworkSpec map[string]any
