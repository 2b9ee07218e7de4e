package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// persistentVolumeClaim: Bound is Ready; Lost is Failed; otherwise waiting.
func persistentVolumeClaim(u *unstructured.Unstructured) Result {
	switch phase := stringField(u.Object, "status", "phase"); phase {
	case "Bound":
		return ready()
	case "Lost":
		return failed("claim lost its volume")
	default:
		return pending("claim %s, waiting to be bound", or(phase, "Pending"))
	}
}
