package history

import (
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/status"
)

// SettleWindow is how long a resource may take to settle after rsync
// applies it. An apply passes through states that mean nothing: queued,
// applied but not reported by the monitor yet (NotPresent for a fraction
// of a second), present but not ready while its controller catches up.
// Within the window those are not recorded; the resource is recorded once,
// as soon as it is Ready or when the window ends, in whatever state it is
// then. An instantiate of 26 resources so writes about one entry per
// resource instead of three or four.
const SettleWindow = 2 * time.Second

// settle returns the snapshot diff should see, with the resources that are
// still settling held back: a new one left out, a known one shown as
// recorded. A resource settles from when rsync last set its status
// (ResourceState.Since) while rsync queues or applies it; a new resource
// without that time (a pod) from when the recorder first saw it (seen,
// by key). It also returns those first sightings of the resources it
// still holds, and when to look again (zero when it holds nothing).
// Anything rsync failed, retries or waits for, anything going away, and any
// change long after an apply is never held.
func settle(c cursor, snap status.Snapshot, now time.Time, seen sightings) (status.Snapshot, sightings, time.Time) {
	var next time.Time
	held := sightings{}
	out := snap
	out.Resources = make([]status.ResourceState, 0, len(snap.Resources))
	for _, r := range snap.Resources {
		k, cl := r.Key.String(), keyCluster(r.Key)
		prev, known := c.get(cl, k)
		start, sighted := r.Since, false
		if start.IsZero() && !known {
			start, sighted = now, true
			if t, ok := seen[cl][k]; ok {
				start = t
			}
		}
		if !settling(r, start, now) {
			out.Resources = append(out.Resources, r)
			continue
		}
		if until := start.Add(SettleWindow); next.IsZero() || until.Before(next) {
			next = until
		}
		if sighted {
			held.put(cl, k, start)
		}
		if known {
			r.RsyncStatus, r.ClusterStatus, r.ReadyStatus, r.SyncStatus = prev.Rsync, prev.Cluster, prev.Ready, prev.Sync
			out.Resources = append(out.Resources, r)
		}
	}
	return out, held, next
}

// sightings are when resources still settling were first seen, by
// cluster and resource key: a pass over some clusters replaces theirs
// alone, without walking the others' (thousands, on a fleet).
type sightings map[string]map[string]time.Time

func (s sightings) put(cluster, key string, t time.Time) {
	m := s[cluster]
	if m == nil {
		m = map[string]time.Time{}
		s[cluster] = m
	}
	m[key] = t
}

// settling reports a resource still settling at now, its window opened at
// start: rsync queued or applied it (or it is a pod), it is not Ready yet,
// and the window is open. A start in the future by more than the window
// (a skewed clock) holds nothing.
func settling(r status.ResourceState, start, now time.Time) bool {
	switch r.RsyncStatus {
	case "", appcontext.RsyncPending, appcontext.RsyncApplied:
	default:
		return false
	}
	if r.ReadyStatus == string(health.Ready) || start.IsZero() {
		return false
	}
	return now.Before(start.Add(SettleWindow)) && now.After(start.Add(-SettleWindow))
}
