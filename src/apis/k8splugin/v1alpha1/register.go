package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and version, and the resource's names.
const (
	Group    = "k8splugin.io"
	Version  = "v1alpha1"
	Kind     = "ResourceBundleState"
	Resource = "resourcebundlestates"
)

// Labels rsync puts on every object it applies (and on pod templates).
// Watchers and the status engine read the argus.io labels; the composite
// emco/deployment-id value is never parsed.
const (
	LabelDeploymentID = "emco/deployment-id"
	LabelContextID    = "argus.io/context-id"
	LabelApp          = "argus.io/app"
	// LabelRBInstanceID is k8splugin's own label, which its clients and
	// tools select a v1 instance's objects by; v1 instances carry it too.
	LabelRBInstanceID = "k8splugin.io/rb-instance-id"
)

// Annotations of ownership. rsync puts AnnotationOwner on every object it
// applies: the deployment intent group ("dig:<project>/<composite app>/
// <version>/<dig>") or v1 instance ("instance:<id>") it belongs to, and
// never applies over an object another one owns, or one it did not create,
// unless the deployment asks to adopt (spec.syncPolicy.adopt) and the
// object allows it with AnnotationAdopt: "true" (removed once adopted).
const (
	AnnotationOwner = "argus.io/owner"
	AnnotationAdopt = "argus.io/adopt"
)

// GV is k8splugin.io/v1alpha1.
func GV() schema.GroupVersion { return schema.GroupVersion{Group: Group, Version: Version} }

// GVR is the resource the dynamic client addresses.
func GVR() schema.GroupVersionResource { return GV().WithResource(Resource) }

// GVK is the kind's full name.
func GVK() schema.GroupVersionKind { return GV().WithKind(Kind) }

// AddToScheme registers the types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GV(), &ResourceBundleState{}, &ResourceBundleStateList{})
	metav1.AddToGroupVersion(s, GV())
	return nil
}
