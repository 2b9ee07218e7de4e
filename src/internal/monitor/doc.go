// Package monitor is the in-cluster controller that keeps every
// ResourceBundleState's status current.
//
// It watches, through label-filtered dynamic informers (emco/deployment-id
// exists), the kinds of SPEC section 2 always, plus every kind named in any
// bundle's spec.kinds or configured as an extra kind (by flag or ConfigMap,
// applied without a restart). A kind that cannot be watched is reported in
// status.unwatchedKinds and counts as Unknown.
//
// Shape (as sample-controller): event handlers only enqueue keys. A kinds
// workqueue starts and stops informers; a bundle workqueue, keyed by the
// bundle's namespace/name, rebuilds a bundle's status from the informer
// caches. A change after a quiet CoalesceWindow syncs its bundle at once;
// changes within the window after a sync become one sync at its end. Writes
// of one bundle draw on a token bucket of two that refills one per
// MinWriteInterval (see pacer); each write is a merge patch of the whole
// status with the cached resourceVersion as precondition, retried with
// backoff on conflict, and a status the patch would not change is not
// written. Because the status is rebuilt from the
// caches and every list is written whole, a deleted object's entry always
// disappears. Statuses too large for the API server are trimmed in steps.
//
// A Lease (kube-system/argus-monitor by default) is renewed every 10 s so the
// orchestrator can tell a live monitor from a silent one.
//
//	m, err := monitor.New(monitor.Options{Config: restConfig})
//	err = m.Run(ctx)
package monitor
