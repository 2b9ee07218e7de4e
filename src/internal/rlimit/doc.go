// Package rlimit raises the process's open-file limit and derives from it
// the connection cap the API may use, and then the cap on callback
// deliveries in flight from what the listeners leave, so that neither
// client connections nor callbacks can take the descriptors the stores and
// the cluster clients and watchers need.
//
//	soft, _ := rlimit.RaiseNoFile()
//	conns, _ := rlimit.MaxConnections(0, soft)             // the automatic cap
//	deliveries, _ := rlimit.MaxDeliveries(0, soft, conns) // what the listeners leave
package rlimit
