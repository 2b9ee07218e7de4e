package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ResourceBundleState reports the state of one app's resources on one cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rbs,categories=argus
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.resourceCount`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ResourceBundleState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ResourceBundleStateSpec `json:"spec"`
	// +optional
	Status ResourceBundleStateStatus `json:"status,omitempty"`
}

// ResourceBundleStateSpec selects the bundle's objects.
type ResourceBundleStateSpec struct {
	// Selector picks the bundle's objects by label, in every namespace the
	// monitor watches; rsync sets matchLabels {emco/deployment-id: ...}.
	Selector *metav1.LabelSelector `json:"selector"`
	// Kinds are the kinds rsync applied for the bundle. The monitor watches
	// them on demand, in addition to the kinds it always watches.
	// +optional
	// +listType=atomic
	Kinds []GroupVersionKind `json:"kinds,omitempty"`
}

// GroupVersionKind names a kind; Group is empty for the core group.
type GroupVersionKind struct {
	// +optional
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// ResourceBundleStateStatus is written by the monitor only. Every field is
// always written, so a merge patch of the status replaces it whole.
type ResourceBundleStateStatus struct {
	// Ready is true when every tracked object is Ready (and no kind is unwatched).
	Ready bool `json:"ready"`
	// ResourceCount is the number of entries in all the lists.
	ResourceCount int32 `json:"resourceCount"`
	// Reason summarises the entries that are not Ready; empty when Ready.
	Reason string `json:"reason"`
	// Trimmed is true when entries were shortened to stay under the API
	// server's object size limit.
	Trimmed bool `json:"trimmed"`
	// ObservedGeneration is the spec generation this status reflects.
	ObservedGeneration int64 `json:"observedGeneration"`
	// FieldsHashed says the entries carry managedFieldsHash: an entry
	// without one is an object no longer holding any field Argus applied.
	FieldsHashed bool `json:"fieldsHashed"`
	// UnwatchedKinds are kinds of spec.kinds (or configured extra kinds) the
	// monitor cannot watch, with the reason; their objects count as Unknown.
	// +nullable
	// +listType=atomic
	UnwatchedKinds []KindCondition `json:"unwatchedKinds"`

	// +nullable
	// +listType=atomic
	PodStatuses []ResourceStatus `json:"podStatuses"`
	// +nullable
	// +listType=atomic
	DeploymentStatuses []ResourceStatus `json:"deploymentStatuses"`
	// +nullable
	// +listType=atomic
	ServiceStatuses []ResourceStatus `json:"serviceStatuses"`
	// +nullable
	// +listType=atomic
	ConfigMapStatuses []ResourceStatus `json:"configMapStatuses"`
	// +nullable
	// +listType=atomic
	SecretStatuses []ResourceStatus `json:"secretStatuses"`
	// +nullable
	// +listType=atomic
	DaemonSetStatuses []ResourceStatus `json:"daemonSetStatuses"`
	// +nullable
	// +listType=atomic
	IngressStatuses []ResourceStatus `json:"ingressStatuses"`
	// +nullable
	// +listType=atomic
	JobStatuses []ResourceStatus `json:"jobStatuses"`
	// +nullable
	// +listType=atomic
	StatefulSetStatuses []ResourceStatus `json:"statefulSetStatuses"`
	// +nullable
	// +listType=atomic
	ReplicaSetStatuses []ResourceStatus `json:"replicaSetStatuses"`
	// +nullable
	// +listType=atomic
	PersistentVolumeClaimStatuses []ResourceStatus `json:"persistentVolumeClaimStatuses"`
	// +nullable
	// +listType=atomic
	CronJobStatuses []ResourceStatus `json:"cronJobStatuses"`
	// ResourceStatuses holds every other kind, custom resources included.
	// +nullable
	// +listType=atomic
	ResourceStatuses []CustomResourceStatus `json:"resourceStatuses"`
}

// TypedLists are the status's lists of typed entries, for the readers that
// walk them all (checking, indexing, trimming).
func (s *ResourceBundleStateStatus) TypedLists() []*[]ResourceStatus {
	return []*[]ResourceStatus{&s.PodStatuses, &s.DeploymentStatuses, &s.ServiceStatuses, &s.ConfigMapStatuses,
		&s.SecretStatuses, &s.DaemonSetStatuses, &s.IngressStatuses, &s.JobStatuses, &s.StatefulSetStatuses,
		&s.ReplicaSetStatuses, &s.PersistentVolumeClaimStatuses, &s.CronJobStatuses}
}

// ResourceStatus is one object of a typed kind: its apiVersion, kind,
// metadata (without managedFields), spec and status, and its readiness as
// the monitor computed it. Secrets never carry data.
type ResourceStatus struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Metadata runtime.RawExtension `json:"metadata"`
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Spec *runtime.RawExtension `json:"spec,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Status *runtime.RawExtension `json:"status,omitempty"`
	// +kubebuilder:validation:Enum=Ready;Pending;Failed;Terminating;NotPresent;Unknown
	ReadyStatus string `json:"readyStatus"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// ManagedFieldsHash hashes the object's values at the fields Argus's
	// server-side apply manages (the set included); the orchestrator
	// compares it with what its apply left to tell drift.
	// +optional
	ManagedFieldsHash string `json:"managedFieldsHash,omitempty"`
}

// CustomResourceStatus is one object of any other kind.
type CustomResourceStatus struct {
	// +optional
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Object is the object without managedFields.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Object runtime.RawExtension `json:"object"`
	// +kubebuilder:validation:Enum=Ready;Pending;Failed;Terminating;NotPresent;Unknown
	ReadyStatus string `json:"readyStatus"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// ManagedFieldsHash hashes the object's values at the fields Argus's
	// server-side apply manages (the set included); the orchestrator
	// compares it with what its apply left to tell drift.
	// +optional
	ManagedFieldsHash string `json:"managedFieldsHash,omitempty"`
}

// KindCondition says why a kind cannot be watched.
type KindCondition struct {
	GroupVersionKind `json:",inline"`
	Reason           string `json:"reason"`
}

// ResourceBundleStateList is a list of ResourceBundleStates.
//
// +kubebuilder:object:root=true
type ResourceBundleStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ResourceBundleState `json:"items"`
}
