// Package rsync applies an AppContext's resources to its clusters and deletes
// them again, recording each resource's state (Pending → Applied / Failed /
// Retrying → Deleted) in the AppContext.
//
// Objects are applied with server-side apply (field manager "argus"), CRDs
// and Namespaces first, each labelled emco/deployment-id,
// argus.io/context-id and argus.io/app (pod templates and volume claim
// templates too), followed by one ResourceBundleState per app per cluster
// for the monitor. A cluster that cannot be reached makes its resources
// Retrying: rsync retries with capped exponential backoff and jitter until it
// succeeds or the action is cancelled.
//
// Actions on one group (a DIG or an instance) run one after another;
// Terminate and Stop cancel the action in flight first. An action's progress
// lives in etcd, so Resume continues whatever an earlier process left
// Instantiating, Updating or Terminating.
package rsync
