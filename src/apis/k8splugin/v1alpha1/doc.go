// Package v1alpha1 defines the ResourceBundleState custom resource
// (k8splugin.io/v1alpha1): one per app per cluster, created by rsync with a
// label selector and the kinds it applied, and kept current by the monitor,
// which writes the state and readiness of every selected object into its
// status. The orchestrator's watchers read it.
//
// The CRD under deployments/kubernetes/monitor is generated from these types
// (make generate) and belongs to the monitor's manifests.
//
// +kubebuilder:object:generate=true
// +groupName=k8splugin.io
package v1alpha1
