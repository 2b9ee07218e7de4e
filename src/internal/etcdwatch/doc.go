// Package etcdwatch follows etcd prefixes: it lists them, then watches
// from the listed revision, and when the watch breaks (a compaction
// overtook it, the leader was lost, the client was cut off) it lists again
// and hands the consumer only the differences, deletions during the gap
// included. Every loop of Argus that watches from a listed revision goes
// through it (the context cache, the watcher manager, the replica set,
// owned records); WaitChange is its one-shot form, for a reader that waits
// for the next change after what it read.
//
// The consumer sees each key's changes once and in order: a key it already
// has at the same mod revision is never handed over again, and a key that
// went while the watch was broken comes as a delete — or, for a follower
// that remembers keys by their hash (Options.HashKeys), the listing comes
// whole as a Reset, which the consumer replaces what it has with.
//
//	f, _ := etcdwatch.New(etcdwatch.Options{Client: cli, Prefixes: []string{"/argus/ctx/"},
//		Apply: func(b etcdwatch.Batch) { for _, ev := range b.Events { ... } }})
//	go f.Run(ctx) // returns once ctx ends
package etcdwatch
