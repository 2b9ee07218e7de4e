// Package backoff holds the retry timing every retry loop of Argus uses
// (rsync, watchers, the context cache, notification workers, the replica
// set, the etcd list-and-watch loops): a Backoff (base, cap, linear or
// doubling growth, jitter) and the cancellable wait between attempts.
//
//	b := backoff.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}
//	for err := try(); err != nil; err = try() {
//		if !b.Wait(ctx) {
//			return ctx.Err()
//		}
//	}
//
// Callers that schedule instead of sleeping (a timer armed by a worker, a
// count stored with the work) ask for Delay(n) or Next().
package backoff
