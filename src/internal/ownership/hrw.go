package ownership

import "hash/fnv"

// Pick returns the member that rendezvous hashing gives item to: the one
// with the highest weight(item, member). Every replica computes the same
// answer from the same member list, and removing a member moves only its
// items. "" when there are no members.
func Pick(item string, members []string) string {
	best, bestW := "", uint64(0)
	for _, m := range members {
		if w := weight(item, m); best == "" || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}

// weight mixes FNV-1a of item and member through splitmix64's finalizer:
// FNV alone spreads short, similar keys poorly.
func weight(item, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(item))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(member))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
