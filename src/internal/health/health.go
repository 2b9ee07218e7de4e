package health

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Status is an object's readiness.
type Status string

// The readiness vocabulary of SPEC section 3.
const (
	Ready       Status = "Ready"
	Pending     Status = "Pending"
	Failed      Status = "Failed"
	Terminating Status = "Terminating"
	NotPresent  Status = "NotPresent"
	Unknown     Status = "Unknown"
)

// Result is a status with the human reason for it; Reason is empty for a
// plain Ready.
type Result struct {
	Status Status
	Reason string
}

func ready() Result                          { return Result{Status: Ready} }
func readyBecause(f string, a ...any) Result { return Result{Ready, fmt.Sprintf(f, a...)} }
func pending(f string, a ...any) Result      { return Result{Pending, fmt.Sprintf(f, a...)} }
func failed(f string, a ...any) Result       { return Result{Failed, fmt.Sprintf(f, a...)} }

// rule decides readiness for one kind, after the generic checks.
type rule func(u *unstructured.Unstructured) Result

// ruleFor returns the rule of a kind, or nil when the kind has none.
func ruleFor(gk schema.GroupKind) rule {
	switch gk {
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
		return deployment
	case schema.GroupKind{Group: "apps", Kind: "StatefulSet"}:
		return statefulSet
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		return daemonSet
	case schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}:
		return replicaSet
	case schema.GroupKind{Kind: "Pod"}:
		return pod
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		return job
	case schema.GroupKind{Group: "batch", Kind: "CronJob"}:
		return cronJob
	case schema.GroupKind{Kind: "PersistentVolumeClaim"}:
		return persistentVolumeClaim
	case schema.GroupKind{Kind: "PersistentVolume"}:
		return persistentVolume
	case schema.GroupKind{Kind: "Service"}:
		return service
	case schema.GroupKind{Group: "networking.k8s.io", Kind: "Ingress"}:
		return ingress
	case schema.GroupKind{Kind: "Namespace"}:
		return namespace
	case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
		return customResourceDefinition
	}
	return nil
}

// presentIsReady are built-in kinds with no status to wait for.
func presentIsReady(gk schema.GroupKind) bool {
	switch gk.Group {
	case "":
		switch gk.Kind {
		case "ConfigMap", "Secret", "ServiceAccount", "Endpoints", "LimitRange", "ResourceQuota":
			return true
		}
	case "rbac.authorization.k8s.io", "scheduling.k8s.io", "storage.k8s.io", "admissionregistration.k8s.io", "discovery.k8s.io":
		return true
	case "networking.k8s.io":
		return gk.Kind == "NetworkPolicy" || gk.Kind == "IngressClass"
	case "policy":
		return gk.Kind == "PodDisruptionBudget"
	case "coordination.k8s.io":
		return gk.Kind == "Lease"
	}
	return false
}

// Evaluate computes one object's readiness (SPEC section 3).
func Evaluate(u *unstructured.Unstructured) Result {
	if ts := u.GetDeletionTimestamp(); ts != nil {
		if f := u.GetFinalizers(); len(f) > 0 {
			return Result{Terminating, "being deleted; waiting for finalizers " + strings.Join(f, ", ")}
		}
		return Result{Terminating, "being deleted"}
	}
	generation := intOr(u.Object, 0, "metadata", "generation")
	if og, found := int64Field(u.Object, "status", "observedGeneration"); found && og < generation {
		return pending("controller has not observed generation %d yet (observed %d)", generation, og)
	}
	conds := conditions(u)
	if c, ok := conds["Stalled"]; ok && c.status == "True" {
		return failed("%s", c.describe("stalled"))
	}
	if c, ok := conds["Reconciling"]; ok && c.status == "True" {
		return pending("%s", c.describe("reconciling"))
	}
	gk := u.GroupVersionKind().GroupKind()
	if r := ruleFor(gk); r != nil {
		return r(u)
	}
	if c, ok := conds["Ready"]; ok {
		if c.status == "True" {
			return ready()
		}
		return pending("%s", c.describe("not ready"))
	}
	if presentIsReady(gk) {
		return ready()
	}
	return readyBecause("no readiness rule")
}

// condition is one entry of status.conditions.
type condition struct {
	status, reason, message string
}

// describe renders "Reason: message", falling back to what.
func (c condition) describe(what string) string {
	switch {
	case c.reason != "" && c.message != "":
		return c.reason + ": " + c.message
	case c.message != "":
		return c.message
	case c.reason != "":
		return c.reason
	}
	return what
}

func conditions(u *unstructured.Unstructured) map[string]condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make(map[string]condition, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		if typ == "" {
			continue
		}
		c := condition{}
		c.status, _ = m["status"].(string)
		c.reason, _ = m["reason"].(string)
		c.message, _ = m["message"].(string)
		out[typ] = c
	}
	return out
}

// int64Field reads an integer that JSON may have decoded as int64 or float64.
func int64Field(obj map[string]any, path ...string) (int64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(obj, path...)
	if !found || err != nil {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int:
		return int64(n), true
	case float64:
		return int64(n), true
	}
	return 0, false
}

// intOr reads an integer field, or def when it is absent.
func intOr(obj map[string]any, def int64, path ...string) int64 {
	if v, ok := int64Field(obj, path...); ok {
		return v
	}
	return def
}

func stringField(obj map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(obj, path...)
	return s
}

func boolField(obj map[string]any, path ...string) bool {
	b, _, _ := unstructured.NestedBool(obj, path...)
	return b
}
