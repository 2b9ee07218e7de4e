// Package ownership shares work between orchestrator replicas through etcd:
// which replicas are alive, and which one runs each work item (a cluster's
// watcher, a group's rsync actions and history, a subscription's delivery
// worker, the AAI sink).
//
// Each replica opens a concurrency.Session (a lease kept alive by the
// client, TTL Options.TTL) and registers itself on it:
//
//	<prefix>/replicas/<id>            Member (id, url, started, lease)
//	<prefix>/owners/<kind>/<item>     the holder's id, on the holder's lease
//	<prefix>/locks/<name>/<lease>     Set.Lock's mutexes (concurrency.Mutex)
//
// An item belongs to the live replica that rendezvous (highest random
// weight) hashing picks from the members every replica sees, so a replica
// joining or leaving moves only its share. Hashing alone is not exclusive
// while replicas' views differ, so a replica runs an item only while it
// holds the item's claim key, created with If(CreateRevision == 0) on its
// lease. A replica that hashes an item to itself but finds another claim
// waits until that claim is deleted: by its holder, which sees the new
// member set, stops the item and deletes the claim, or by etcd when the
// holder's lease expires. So in steady state nothing runs twice, and the
// items of a replica that died are taken over within the TTL.
//
// Consumers tell a Kind which items exist (Want, Drop) and are called back
// (Handler.Acquired, Handler.Released) from the kind's workers, never
// twice at once for one item. A kind's handlers may be attached after the
// kind is made (Kind.Handle), so a part can be built with the kind it
// needs and then handle it; Run refuses a kind left without one. A replica whose lease is lost (etcd
// unreachable for a whole TTL) releases everything first and registers
// again with a new lease.
//
// Records is the work that comes with an item: any replica puts a record
// for an item in etcd, the item's owner follows the records (through
// etcdwatch, so a gap in the watch loses nothing), acts on them and
// acknowledges them on its lease, and the writer waits for the
// acknowledgement (rsync's action records, the subscription markers).
//
//	set, _ := ownership.New(ownership.Options{Client: cli, Prefix: "/argus", ID: "r1", URL: "http://10.0.0.1:9015"})
//	clusters := set.Kind("clusters", nil)     // before Run
//	clusters.Handle(handler)
//	go set.Run(ctx)
//	clusters.Want("provider+edge01")          // handler.Acquired("provider+edge01") once claimed
//
//	recs, _ := ownership.NewRecords[Action, Done](ownership.RecordsOptions[Action]{Client: cli,
//		Prefix: "/argus/actions/", AckPrefix: "/argus/done/", Claims: groups, Owner: runner, Lease: set.Lease})
//	go recs.Run(ctx)                    // wants every item with a record
//	// the kind's Handler calls recs.Acquired(item) and recs.Released(item)
//	recs.Put(ctx, "group1/ctx1", action) // any replica; the owner's runner.Changed gets it
//	recs.WaitItem(ctx, "group1", func(st ownership.State[Action, Done]) bool { return len(st.Acks) > 0 })
package ownership
