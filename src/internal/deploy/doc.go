// Package deploy carries out the lifecycle actions on deployment intent
// groups (approve, instantiate, update, terminate, stop): it checks the
// transition against the DIG's state, renders every app with its profile
// and overrides, places it on clusters, records the plan as an AppContext
// and hands it to rsync, which does the work asynchronously.
//
// It also resolves the logical cloud a DIG deploys in (package
// logicalcloud runs the clouds themselves), refuses intents naming
// controllers Argus does not implement, and applies generic-k8s-intents
// (package gac) to the plan.
package deploy
