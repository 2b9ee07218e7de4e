// Package deploy carries out the lifecycle actions on deployment intent
// groups (approve, instantiate, update, terminate, stop): it checks the
// transition against the DIG's state, renders every app with its profile
// and overrides, places it on clusters, records the plan as an AppContext
// and hands it to rsync, which does the work asynchronously.
package deploy
