// Package rlimit fits the process to the limits it runs under. It raises
// the open-file limit and derives from it the connection cap the API may
// use, and then the cap on callback deliveries in flight from what the
// listeners leave, so that neither client connections nor callbacks can
// take the descriptors the stores and the cluster clients and watchers
// need. It sets the Go runtime's memory limit from the container's, so
// that the heap's growth after a burst meets the collector before the
// kernel's OOM killer, and the collector's target (GOGC) to the
// orchestrator's unless the environment chose one.
//
//	soft, _ := rlimit.RaiseNoFile()
//	conns, _ := rlimit.MaxConnections(0, soft)             // the automatic cap
//	deliveries, _ := rlimit.MaxDeliveries(0, soft, conns) // what the listeners leave
//	rlimit.SetMemoryLimit(rlimit.MemoryOptions{Ratio: rlimit.DefaultMemoryRatio, Reserve: childrenMemory})
package rlimit
