// Package syncstate decides whether what Argus applied is still what a
// cluster holds: a resource is Synced, OutOfSync (a field Argus applied has
// another value on the cluster, or is no longer Argus's), Missing (applied,
// now absent) or Unknown (the cluster cannot be believed now). It is pure:
// the monitor, rsync and the status engine share it and none of their
// state.
//
// What is compared is only what Argus manages through server-side apply:
// the fields of the object's managedFields entry of manager "argus",
// operation Apply. Defaulted fields and fields controllers write belong to
// other managers and never count. A field changed by hand (kubectl edit,
// patch, a controller's update) moves to its writer, so Argus's set
// shrinks; Hash covers the set and the values at it, so either change
// shows. rsync hashes the object its apply returns (API server
// normalisation included) and stores the hash with the resource; the
// monitor hashes the live object and reports the hash per bundle entry;
// they are compared, never the objects.
//
//	applied := syncstate.Hash(response.Object)     // rsync, after the apply
//	live := syncstate.Hash(cached.Object)          // monitor, per object
//	st, why := syncstate.Decide(syncstate.Input{Applied: true, AppliedHash: applied,
//		Believable: true, Reports: true, Found: true, LiveHash: live})
package syncstate
