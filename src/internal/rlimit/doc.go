// Package rlimit raises the process's open-file limit and derives the
// connection cap the API may use from it, so that client connections can
// never take the descriptors the stores, the cluster watchers and the
// callbacks need.
//
//	soft, _ := rlimit.RaiseNoFile()
//	conns := rlimit.MaxConnections(0, soft) // the automatic cap
package rlimit
