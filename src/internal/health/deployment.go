package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// deployment: ready when updated, ready and available replicas all equal
// spec.replicas and no old replicas remain; a paused Deployment is Ready
// with a reason; ProgressDeadlineExceeded is Failed.
func deployment(u *unstructured.Unstructured) Result {
	o := u.Object
	if boolField(o, "spec", "paused") {
		return readyBecause("deployment is paused")
	}
	if c, ok := conditions(u)["Progressing"]; ok && c.status == "False" && c.reason == "ProgressDeadlineExceeded" {
		return failed("%s", c.describe("progress deadline exceeded"))
	}
	want := intOr(o, 1, "spec", "replicas")
	updated := intOr(o, 0, "status", "updatedReplicas")
	readyN := intOr(o, 0, "status", "readyReplicas")
	available := intOr(o, 0, "status", "availableReplicas")
	total := intOr(o, 0, "status", "replicas")
	switch {
	case updated < want:
		return pending("%d of %d replicas updated", updated, want)
	case total > updated:
		return pending("%d old replicas pending termination", total-updated)
	case readyN < want:
		return pending("%d of %d replicas ready", readyN, want)
	case available < want:
		return pending("%d of %d replicas available", available, want)
	}
	return ready()
}
