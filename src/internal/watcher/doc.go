// Package watcher runs one watcher per cluster that has live contexts. A
// watcher watches the cluster's ResourceBundleStates (labelled
// argus.io/context-id) and its monitor's Lease, stores each bundle's status
// into its AppContext, and keeps the cluster's state — connectivity
// (Available/Unreachable) and monitor (Running/Silent/NotInstalled) with
// last-seen — in etcd for the status engine.
//
// The Manager learns which clusters need a watcher from a watch on the
// contexts' status keys: a watcher starts when the first live context lands
// on its cluster and stops when the last one is terminated. Everything is
// event-driven; the only timer is the one that declares a monitor Silent
// when its Lease stops moving.
//
// With several orchestrator replicas, Options.Claims (ownership.Kind)
// decides which replica watches a cluster: the manager wants every
// cluster with live contexts and runs the watchers of those it is handed
// (Acquired) until they are taken back (Released), so each cluster has
// exactly one watcher among the replicas.
package watcher
