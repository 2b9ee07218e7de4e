package health

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// failingWaitReason reports container waiting reasons that need a human: the
// kubelet keeps retrying, but the pod will not become ready on its own.
func failingWaitReason(reason string) bool {
	switch reason {
	case "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
		"CreateContainerConfigError", "CreateContainerError":
		return true
	}
	return false
}

// pod: Succeeded is Ready; Failed, or a container crash-looping or unable to
// pull its image, is Failed; otherwise the PodReady condition decides.
func pod(u *unstructured.Unstructured) Result {
	o := u.Object
	switch stringField(o, "status", "phase") {
	case "Succeeded":
		return readyBecause("completed")
	case "Failed":
		c := condition{reason: stringField(o, "status", "reason"), message: stringField(o, "status", "message")}
		return failed("%s", c.describe("pod failed"))
	}
	for _, field := range []string{"initContainerStatuses", "containerStatuses"} {
		list, _, _ := unstructured.NestedSlice(o, "status", field)
		for _, item := range list {
			cs, _ := item.(map[string]any)
			reason := stringField(cs, "state", "waiting", "reason")
			if failingWaitReason(reason) {
				name, _ := cs["name"].(string)
				return failed("container %s: %s", name, reason)
			}
		}
	}
	conds := conditions(u)
	if c, ok := conds["Ready"]; ok && c.status == "True" {
		return ready()
	}
	if c, ok := conds["PodScheduled"]; ok && c.status == "False" {
		return pending("%s", c.describe("not scheduled"))
	}
	var notReady []string
	list, _, _ := unstructured.NestedSlice(o, "status", "containerStatuses")
	for _, item := range list {
		cs, _ := item.(map[string]any)
		if r, _ := cs["ready"].(bool); !r {
			name, _ := cs["name"].(string)
			notReady = append(notReady, name)
		}
	}
	if len(notReady) > 0 {
		return pending("containers not ready: %s", strings.Join(notReady, ", "))
	}
	if c, ok := conds["Ready"]; ok {
		return pending("%s", c.describe("not ready"))
	}
	return pending("pod %s", strings.ToLower(or(stringField(o, "status", "phase"), "pending")))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
