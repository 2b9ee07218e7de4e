// Package placement decides which clusters an app goes to from its app
// intent: every allOf entry, plus one cluster among the anyOf entries. An
// entry names a cluster of a provider, or all of a provider's clusters that
// carry a label. Resolve is a pure function of the intent and the known
// clusters.
package placement
