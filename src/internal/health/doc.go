// Package health decides whether a Kubernetes object is ready, and how the
// readiness of many objects adds up. Everything here is a pure function of
// unstructured objects: no clients, no clocks, no globals.
//
// Evaluate applies, in order: deletionTimestamp → Terminating; a controller
// that has not observed the latest generation → Pending; a Stalled=True
// condition → Failed; Reconciling=True → Pending; then the rule of the
// object's kind (one file per kind); then a Ready condition if the object has
// one; otherwise the object is Ready because it exists.
//
// Aggregate combines statuses: any Failed → Failed; else any Unknown →
// Unknown; else any Terminating, Pending or NotPresent → Pending; else Ready.
// Workload carries a workload's pods up to it: a Pending Deployment,
// StatefulSet, DaemonSet, ReplicaSet or Job with a Failed pod is Failed,
// with the pod's reason (the status engine, which sees both, applies it).
//
//	r := health.Evaluate(obj) // health.Result{Status: health.Pending, Reason: "1 of 2 replicas ready"}
package health
