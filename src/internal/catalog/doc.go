// Package catalog stores Argus's metadata — projects, composite apps, clusters
// and everything else an EMCO or k8splugin user onboards — in MongoDB.
//
// Each resource type is a Kind: a collection, its parent kind, and so the key
// fields that identify an object (a composite app is keyed by project and
// composite app). A compound unique index on the key makes Create race-free
// without transactions (FerretDB has none). Create checks that the parent
// exists; Delete refuses while child objects exist.
//
// With an index (Options.Index), gets, list pages (ListPage) and parent checks are served
// from an index in etcd that writers keep after MongoDB (index.go): FerretDB
// v1 reads a whole collection for nearly every query, so the index keeps
// them fast at any size. Markers (write-ahead intents, delete marks) are
// signed with the replica and lease that set them (Options.Owner), so replicas
// sharing one catalogue never clear each other's work in flight.
//
// Open builds the catalogue ready to use in one call: collections
// prepared, markers signed, leftovers of killed writers repaired, index
// reconciled.
//
//	cat, _, _ := catalog.Open(ctx, catalog.Options{DB: db, Index: etcdClient, RepairBefore: time.Now()})
//	projects := catalog.For[catalog.ProjectSpec](cat, catalog.Projects)
//	err := projects.Create(ctx, catalog.Key{"p1"}, obj) // errdefs.ErrConflict on a duplicate
package catalog
