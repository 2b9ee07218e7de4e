package rlimit

// Automatic connection cap: at most autoMax, and never more than a
// quarter of the descriptors, the rest being headroom for the stores
// (embedded etcd's WAL and snapshots, FerretDB's SQLite files), cluster
// watchers and callback deliveries.
const (
	autoMax     = 4096
	autoDivisor = 4
	// minReserve descriptors (or half of a smaller limit) always stay free
	// of API connections, even when a cap is configured.
	minReserve = 256
)

// MaxConnections returns the API connection cap for a requested value
// (0 = automatic) under an open-file soft limit (0 = unknown), and whether
// the request had to be lowered to keep headroom.
func MaxConnections(requested int, soft uint64) (limit int, lowered bool) {
	if soft == 0 {
		if requested > 0 {
			return requested, false
		}
		return autoMax / autoDivisor, false
	}
	n := int(min(soft, 1<<30))
	ceiling := max(1, n-min(minReserve, n/2))
	if requested == 0 {
		return max(1, min(autoMax, int(min(soft, 1<<30))/autoDivisor)), false
	}
	if requested > ceiling {
		return ceiling, true
	}
	return requested, false
}
