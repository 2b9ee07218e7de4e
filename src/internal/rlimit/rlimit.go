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

// Automatic delivery cap: a quarter of the descriptors the listeners leave,
// at most maxDeliveries; a requested cap is kept under half of them.
const maxDeliveries = 1024

// MaxDeliveries returns the cap on callback deliveries in flight (each
// holds a connection) for a requested value (0 = automatic), drawn from
// the descriptors left by listeners (the API's and the gRPC port's
// connection caps) under an open-file soft limit (0 = unknown), and
// whether the request had to be lowered to keep headroom for the stores,
// the cluster clients and watchers.
func MaxDeliveries(requested int, soft uint64, listeners int) (limit int, lowered bool) {
	if soft == 0 {
		if requested > 0 {
			return requested, false
		}
		return maxDeliveries / autoDivisor, false
	}
	rest := max(0, int(min(soft, 1<<30))-listeners)
	if requested == 0 {
		return max(1, min(maxDeliveries, rest/autoDivisor)), false
	}
	if ceiling := max(1, rest/2); requested > ceiling {
		return ceiling, true
	}
	return requested, false
}
