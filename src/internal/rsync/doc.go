// Package rsync applies an AppContext's resources to its clusters and deletes
// them again, recording each resource's state (Pending → Applied / Failed /
// Waiting / Retrying → Deleted) and the context's status in the AppContext.
//
// Objects are applied with server-side apply (field manager "argus"), each
// labelled emco/deployment-id, argus.io/context-id and argus.io/app (pod
// templates and volume claim templates too), in waves that follow Helm's
// install order (CRDs; Namespaces; accounts, RBAC, config and storage; the
// rest; admission webhooks), the resources of a wave at once; then one
// ResourceBundleState per app per cluster for the monitor. Every app and
// cluster is worked on at once, each cluster's requests bounded by
// ClusterParallelism (and a quarter of that per kind, so kinds an API
// server handles one at a time, like Services, never hold every slot). A
// logical cloud's bundle its user may not write is written with the
// cluster's credentials.
//
// Helm hooks run as EMCO's rsync runs them (hooks.go): pre-install hooks
// before an app's resources, post-install hooks once it is Ready,
// pre-delete and post-delete hooks around its deletion; each waited for
// until the monitor reports it succeeded, deleted as its policy says.
//
// Server-side apply refuses fields a kind's schema lacks whatever
// fieldValidation says, where create and update (what Helm and EMCO use)
// drop them with a warning. rsync does as they do: when an apply fails so,
// it prunes what the cluster's published OpenAPI schema does not declare,
// records a warning per field (Warn, the default), says nothing (Ignore) or
// fails the resource (Strict), and applies again.
//
// Every error is classified from the API status, typed errors and network
// errors, never from its text (classify): transient errors (unreachable,
// 429, 5xx, timeouts, conflicts) make the resource Retrying with capped
// exponential backoff and jitter; a missing kind or namespace makes it
// Waiting until the cluster's API changes (metadata watches on CRDs,
// APIServices and Namespaces, while anything waits) or a slower timer
// fires; what the API server refuses (400, 403, 422 ...) is Failed with its
// message and not retried until the deployment is updated. The context's
// status shows a failure as soon as one resource Failed, with the first
// reasons, while rsync goes on with the rest; the action ends when nothing
// is Retrying or Waiting.
//
// Statuses are written in batches (a recorder per action): the latest
// status per resource, and the context's status when it changes, in as few
// etcd transactions as the request limit allows.
//
// Actions on one group (a DIG or an instance) run one after another;
// Terminate and Stop cancel the actions in flight first, and an update
// supersedes an instantiation still at work. An action's progress lives in
// etcd, so a group's next owner continues whatever an earlier process left
// unfinished (starting what already runs is a no-op).
//
// With several orchestrator replicas, the Dispatcher decides which process
// runs a group's actions: Instantiate, Update and Terminate (on any
// replica) record the action in etcd as an owned record
// (ownership.Records), and the group's owner (Claims, ownership.Kind)
// follows the records with a watch and runs them on its Engine; a record stays until its action ends, so a replica taking a
// group over resumes it by running the group's records (Acquired), and one
// giving it up cancels its runs and leaves the records (Released,
// Engine.Release). Stop, Busy and Idle work on any replica through the
// records and the owner's progress reports.
//
//	d, _ := rsync.NewDispatcher(rsync.DispatcherOptions{Engine: engine, Claims: groups, Lease: set.Lease})
//	go d.Run(ctx)
//	d.Instantiate(group, id) // run by the group's owner, whichever replica that is
package rsync
