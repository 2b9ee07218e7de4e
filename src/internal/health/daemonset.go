package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// daemonSet: ready when every scheduled pod is ready and, unless the
// strategy is OnDelete, updated.
func daemonSet(u *unstructured.Unstructured) Result {
	o := u.Object
	desired := intOr(o, 0, "status", "desiredNumberScheduled")
	if readyN := intOr(o, 0, "status", "numberReady"); readyN < desired {
		return pending("%d of %d pods ready", readyN, desired)
	}
	if stringField(o, "spec", "updateStrategy", "type") != "OnDelete" {
		if updated := intOr(o, 0, "status", "updatedNumberScheduled"); updated < desired {
			return pending("%d of %d pods updated", updated, desired)
		}
	}
	return ready()
}
