package agent

import (
	"sync"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// uplink holds the status the orchestrator has not acknowledged: the
// latest of each resource status, bundle and placement progress, marked
// dirty until a report carrying it is acknowledged. Memory is bounded by
// the cluster's placements and bundles, however long the orchestrator is
// away.
type uplink struct {
	mu         sync.Mutex
	seq        int64
	placements map[WorkKey]*placementUp
	bundles    map[string]*bundleUp // by namespace/name
	inflight   map[int64]carried    // what each unacknowledged report carried
	wake       chan struct{}
}

type placementUp struct {
	gen            int64
	quiet, settled bool
	progressDirty  bool
	statuses       map[string]*pb.ResourceReport
	dirty          map[string]bool
}

type bundleUp struct {
	report *pb.BundleReport
	dirty  bool
}

// carried is what one report held.
type carried struct {
	statuses []struct {
		k   WorkKey
		key string
	}
	progress []WorkKey
	bundles  []string
}

func newUplink() *uplink {
	return &uplink{placements: map[WorkKey]*placementUp{}, bundles: map[string]*bundleUp{}, inflight: map[int64]carried{},
		wake: make(chan struct{}, 1)}
}

var _ Reporter = (*uplink)(nil)

func (u *uplink) signal() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *uplink) placement(k WorkKey) *placementUp {
	p := u.placements[k]
	if p == nil {
		p = &placementUp{statuses: map[string]*pb.ResourceReport{}, dirty: map[string]bool{}}
		u.placements[k] = p
	}
	return p
}

// Statuses takes in changed resource statuses.
func (u *uplink) Statuses(k WorkKey, gen int64, statuses map[string]appcontext.ResourceStatus) {
	u.mu.Lock()
	p := u.placement(k)
	if gen > p.gen {
		p.gen, p.quiet, p.settled, p.progressDirty = gen, false, false, true
	}
	for key, st := range statuses {
		r := &pb.ResourceReport{Key: key, Status: st.Status, Error: st.Error, Warnings: st.Warnings, Manifest: st.Manifest,
			Attempts: int32(st.Attempts), Fields: st.Fields, Adopted: st.Adopted}
		if !st.Updated.IsZero() {
			r.UpdatedUnixNano = st.Updated.UnixNano()
		}
		p.statuses[key], p.dirty[key] = r, true
	}
	u.mu.Unlock()
	u.signal()
}

// Progress takes in a placement's progress.
func (u *uplink) Progress(k WorkKey, gen int64, quiet, settled bool) {
	u.mu.Lock()
	p := u.placement(k)
	switch {
	case gen < p.gen:
	case gen > p.gen:
		p.gen, p.quiet, p.settled, p.progressDirty = gen, quiet || settled, settled, true
	case (quiet && !p.quiet) || (settled && !p.settled):
		p.quiet, p.settled, p.progressDirty = p.quiet || quiet || settled, p.settled || settled, true
	}
	u.mu.Unlock()
	u.signal()
}

// Bundle takes in a bundle's status.
func (u *uplink) Bundle(b Bundle) {
	u.mu.Lock()
	u.bundles[b.Namespace+"/"+b.Name] = &bundleUp{dirty: true, report: &pb.BundleReport{StatusId: b.StatusID, App: b.App,
		Namespace: b.Namespace, Name: b.Name, ResourceVersion: b.ResourceVersion, Status: b.Status, Deleted: b.Deleted}}
	u.mu.Unlock()
	u.signal()
}

// forget drops a placement's state (the orchestrator forgot it).
func (u *uplink) forget(k WorkKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.placements, k)
}

// maxReportBytes bounds one report's estimated size (the stream takes
// 4 MiB messages; a bundle is at most 1.5 MB).
const maxReportBytes = 2 << 20

// next returns a report of what is dirty (nil when nothing is, unless
// heartbeat), marking it carried; monitor fills in the monitor's state.
// A report carrying only the monitor's state is numbered 0.
func (u *uplink) next(heartbeat bool, monitor func() (string, string)) *pb.StatusReport {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := &pb.StatusReport{}
	var c carried
	size := 0
	for k, p := range u.placements {
		if len(p.dirty) == 0 && !p.progressDirty {
			continue
		}
		pr := &pb.PlacementReport{ContextId: k.Context, App: k.App, Generation: p.gen, Quiet: p.quiet, Settled: p.settled}
		for key := range p.dirty {
			if size > maxReportBytes {
				break
			}
			st := p.statuses[key]
			pr.Resources = append(pr.Resources, st)
			size += 128 + len(st.Key) + len(st.Error)
			delete(p.dirty, key)
			c.statuses = append(c.statuses, struct {
				k   WorkKey
				key string
			}{k, key})
		}
		if p.progressDirty && len(p.dirty) == 0 { // progress goes with (after) its last statuses
			p.progressDirty = false
			c.progress = append(c.progress, k)
		}
		r.Placements = append(r.Placements, pr)
		if size > maxReportBytes {
			break
		}
	}
	for name, b := range u.bundles {
		if !b.dirty || (size > 0 && size+len(b.report.Status) > maxReportBytes) {
			continue
		}
		b.dirty = false
		r.Bundles = append(r.Bundles, b.report)
		size += 256 + len(b.report.Status)
		c.bundles = append(c.bundles, name)
	}
	if len(r.Placements) == 0 && len(r.Bundles) == 0 && !heartbeat {
		return nil
	}
	state, reason := monitor()
	r.Monitor = &pb.Monitor{State: state, Reason: reason}
	if len(r.Placements) == 0 && len(r.Bundles) == 0 {
		// A heartbeat: nothing to resend if it is lost (every report
		// carries the monitor's state), so it goes unnumbered and the hub
		// does not acknowledge it — at fleet size the acknowledgements
		// were half the idle traffic.
		return r
	}
	u.seq++
	r.Seq = u.seq
	u.inflight[r.Seq] = c
	if u.dirtyLocked() {
		defer u.signal() // more to send
	}
	return r
}

func (u *uplink) dirtyLocked() bool {
	for _, p := range u.placements {
		if len(p.dirty) > 0 || p.progressDirty {
			return true
		}
	}
	for _, b := range u.bundles {
		if b.dirty {
			return true
		}
	}
	return false
}

// ack forgets what an acknowledged report carried; deleted bundles the
// orchestrator now knows of are dropped.
func (u *uplink) ack(seq int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.inflight[seq]
	if !ok {
		return
	}
	delete(u.inflight, seq)
	for _, name := range c.bundles {
		if b := u.bundles[name]; b != nil && !b.dirty && b.report.Deleted {
			delete(u.bundles, name)
		}
	}
}

// disconnected makes everything unacknowledged dirty again: the next
// stream sends it again.
func (u *uplink) disconnected() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.inflight {
		for _, s := range c.statuses {
			if p := u.placements[s.k]; p != nil && p.statuses[s.key] != nil {
				p.dirty[s.key] = true
			}
		}
		for _, k := range c.progress {
			if p := u.placements[k]; p != nil {
				p.progressDirty = true
			}
		}
		for _, name := range c.bundles {
			if b := u.bundles[name]; b != nil {
				b.dirty = true
			}
		}
	}
	u.inflight = map[int64]carried{}
}

// resendAll makes everything dirty: the orchestrator asked for it all.
func (u *uplink) resendAll() {
	u.mu.Lock()
	for _, p := range u.placements {
		for key := range p.statuses {
			p.dirty[key] = true
		}
		p.progressDirty = true
	}
	for _, b := range u.bundles {
		b.dirty = true
	}
	u.mu.Unlock()
	u.signal()
}
