package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// replicaSet: ready when readyReplicas equals spec.replicas; a
// ReplicaFailure condition (quota, admission) is Failed.
func replicaSet(u *unstructured.Unstructured) Result {
	o := u.Object
	if c, ok := conditions(u)["ReplicaFailure"]; ok && c.status == "True" {
		return failed("%s", c.describe("replica failure"))
	}
	want := intOr(o, 1, "spec", "replicas")
	if readyN := intOr(o, 0, "status", "readyReplicas"); readyN < want {
		return pending("%d of %d replicas ready", readyN, want)
	}
	return ready()
}
