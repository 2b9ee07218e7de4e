// Package backoff holds the one cancellable wait that every retry loop
// (rsync, watchers, the context cache, notification workers) uses between
// attempts.
package backoff
