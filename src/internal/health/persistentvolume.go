package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// persistentVolume: a volume is usable once the PV controller has made it
// Available or bound it; Released (its claim went away) still exists and
// holds its data; Failed (reclamation failed) is Failed.
func persistentVolume(u *unstructured.Unstructured) Result {
	switch phase := stringField(u.Object, "status", "phase"); phase {
	case "Available", "Bound":
		return ready()
	case "Released":
		return readyBecause("released by its claim; not bound again until an administrator reclaims it")
	case "Failed":
		return failed("volume reclamation failed: %s", or(stringField(u.Object, "status", "message"), "no message"))
	default:
		return pending("volume %s, waiting for the volume controller", or(phase, "without a phase"))
	}
}
