// Package status answers status queries (SPEC section 6) for deployment
// intent groups, cluster network intents and v1 instances. Build is a pure
// function of what the stores hold — the AppContext with its bundle
// snapshots, and the clusters' states — and of the query, so every output
// is golden-tested from fixtures. The caller reads those with a few range
// reads, never one key per resource.
package status
