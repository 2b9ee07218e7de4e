// Package history records how each deployment intent group and v1 instance
// got where it is: every transition of a resource's rsync status, cluster
// status or readiness, of the subject's context status and readiness, and
// each user action, with its time and reason, bounded per subject and kept
// in etcd so it survives restarts.
//
// It stands above the status engine in the data flow: a Recorder is fed by
// the same change stream as the notifier (appcontext.Cache tells it which
// groups a batch of etcd events touched), asks the status engine for the
// group's Snapshot, diffs it against the last *recorded* state (the
// group's cursor in etcd, not the last API answer), and appends the
// transitions together with the new cursor in one guarded etcd
// transaction. So a transition is recorded once per change — never once
// per query or per replica — and a recorder that restarts, or a replica
// that takes a group over, re-derives from the cursor without duplicating
// anything. Which groups this process records is asked of an Owner: the
// orchestrator hands each group to exactly one replica (ownership.Kind)
// and records a group again when it takes it over; AllGroups records
// every group.
//
//	store := history.NewStore(history.StoreOptions{Client: cli, Prefix: "/argus", Limit: 1000})
//	rec, _ := history.NewRecorder(history.RecorderOptions{Store: store, Source: reader, Groups: cache.Groups})
//	cache.OnScopedChange(rec.ChangedScoped)
//	go rec.Run(ctx)
//	entries, _ := store.List(ctx, catalog.DIGGroup(dig), history.Filter{Resources: []string{"sink-configmap"}})
package history
