package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// statefulSet: ready when readyReplicas equals spec.replicas and the rollout
// is done: with a partition, the replicas at or above it are updated; without
// one, currentRevision equals updateRevision. OnDelete sets are not rolled.
func statefulSet(u *unstructured.Unstructured) Result {
	o := u.Object
	want := intOr(o, 1, "spec", "replicas")
	readyN := intOr(o, 0, "status", "readyReplicas")
	if readyN < want {
		return pending("%d of %d replicas ready", readyN, want)
	}
	if stringField(o, "spec", "updateStrategy", "type") == "OnDelete" {
		return ready()
	}
	updated := intOr(o, 0, "status", "updatedReplicas")
	if partition := intOr(o, 0, "spec", "updateStrategy", "rollingUpdate", "partition"); partition > 0 {
		if toUpdate := max(want-partition, 0); updated < toUpdate {
			return pending("%d of %d replicas updated (partition %d)", updated, toUpdate, partition)
		}
		return ready()
	}
	if cur, upd := stringField(o, "status", "currentRevision"), stringField(o, "status", "updateRevision"); cur != upd {
		return pending("rolling update in progress: %d of %d replicas updated", updated, want)
	}
	return ready()
}
