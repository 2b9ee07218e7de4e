package hub

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/watcher"
)

// What an agent may report: it speaks for its own cluster only, and what
// it says is bounded as a push cluster's bundles are (watcher.CheckBundle).
const (
	maxReason      = 4096
	maxHash        = 128
	maxWarnings    = 32
	maxReportItems = 10000
)

// rsyncStatuses are the statuses an agent's rsync may report.
var rsyncStatuses = map[string]bool{appcontext.RsyncPending: true, appcontext.RsyncApplied: true, appcontext.RsyncFailed: true,
	appcontext.RsyncRetrying: true, appcontext.RsyncWaiting: true, appcontext.RsyncDeleted: true}

// writes collects one report's etcd operations, in the order they must
// land: statuses and bundles before the progress that rsync waits for.
type writes struct {
	ops, late  []clientv3.Op
	sizes, lsz []int
	progress   map[itemKey]progressRecord
}

func (w *writes) add(op clientv3.Op, size int) {
	w.ops, w.sizes = append(w.ops, op), append(w.sizes, size)
}
func (w *writes) last(op clientv3.Op, size int) {
	w.late, w.lsz = append(w.late, op), append(w.lsz, size)
}

// checkReport refuses a report that breaks the bounds above; a bundle's
// own content is checked when it is stored (a refused bundle is stored as
// refused, as a push cluster's is).
func checkReport(r *pb.StatusReport) error {
	if len(r.GetPlacements())+len(r.GetBundles()) > maxReportItems {
		return status.Errorf(codes.InvalidArgument, "a report may hold at most %d placements and bundles", maxReportItems)
	}
	for _, pr := range r.GetPlacements() {
		for _, rr := range pr.GetResources() {
			if _, err := resourceStatus(rr); err != nil {
				return status.Errorf(codes.InvalidArgument, "resource %.200q of %.40s/%.60s: %v", rr.GetKey(), pr.GetContextId(), pr.GetApp(), err)
			}
		}
	}
	if m := r.GetMonitor(); len(m.GetState()) > 64 || len(m.GetReason()) > maxReason {
		return status.Errorf(codes.InvalidArgument, "the monitor's state or reason is too long")
	}
	return nil
}

// maxQuietToAgent is the longest the hub lets a stream carry nothing to
// the agent: a heartbeat (an unnumbered report, never sent again, so not
// acknowledged for itself) is acknowledged all the same when waiting for
// the next one would leave the stream quiet longer. A stream silent one
// way looks dead to the agent's keepalive (30 s without a read makes it
// ping) and to L7 proxies between (nginx's grpc_read_timeout is 60 s). At
// the default 10 s heartbeat, every other heartbeat is acknowledged; a
// heartbeat of 25 s or more has each acknowledged, and cannot keep a
// stream through a proxy whose read timeout is shorter than it.
const maxQuietToAgent = 25 * time.Second

// report stores what the agent reported, then acknowledges it (a
// heartbeat only as maxQuietToAgent asks).
func (s *session) report(r *pb.StatusReport) error {
	s.h.metrics.reports.Inc()
	if err := checkReport(r); err != nil {
		return err
	}
	w := &writes{progress: map[itemKey]progressRecord{}}
	for _, pr := range r.GetPlacements() {
		if err := s.placement(pr, w); err != nil {
			return err
		}
	}
	for _, b := range r.GetBundles() {
		s.bundle(b, w)
	}
	// Charged before anything is written, and waited for outside stateMu
	// (the sender takes it to record silence): an agent that reports
	// faster than its budget waits, and so does its next report.
	written := 0
	for _, sizes := range [][]int{w.sizes, w.lsz} {
		for _, n := range sizes {
			written += n
		}
	}
	if err := s.throttle(written); err != nil {
		return err
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	state, stateChanged := s.reportedState(r.GetMonitor())
	if stateChanged {
		op, err := s.h.opts.Contexts.ClusterStateOp(s.ref, state)
		if err != nil {
			return err
		}
		w.last(op, 512)
	}
	ops, sizes := append(w.ops, w.late...), append(w.sizes, w.lsz...)
	if len(ops) > 0 {
		if err := s.h.writer.write(s.ctx, s.ref.String(), s.guardCmp(), ops, sizes); err != nil {
			return err
		}
	}
	if stateChanged {
		s.state = state
		s.seenDue = s.nextSeen(state.LastSeen)
	}
	s.mu.Lock()
	for k, pr := range w.progress {
		if it := s.items[k]; it != nil && it.gen == pr.Generation {
			it.progress = pr
		}
	}
	s.mu.Unlock()
	if quiet := time.Duration(s.h.opts.Now().UnixNano() - s.lastSend.Load()); r.GetSeq() != 0 || quiet+s.h.opts.Heartbeat >= maxQuietToAgent {
		s.queue(&pb.HubMessage{Body: &pb.HubMessage_StatusAck{StatusAck: &pb.StatusAck{Seq: r.GetSeq()}}})
	}
	return nil
}

// placement adds the writes of one placement's report: the statuses of
// resources its work names, and its progress when that changed.
func (s *session) placement(pr *pb.PlacementReport, w *writes) error {
	k := itemKey{pr.GetContextId(), pr.GetApp()}
	s.mu.Lock()
	it := s.items[k]
	s.mu.Unlock()
	if it == nil {
		return nil // forgotten meanwhile (a terminated context): nothing to record
	}
	var updates []appcontext.StatusUpdate
	seen := map[string]bool{}
	for _, rr := range pr.GetResources() {
		if !it.keys[rr.GetKey()] || seen[rr.GetKey()] {
			continue
		}
		st, err := resourceStatus(rr) // checked with the report: cannot fail here
		if err != nil {
			return err
		}
		seen[rr.GetKey()] = true
		updates = append(updates, appcontext.StatusUpdate{App: k.app, Cluster: s.ref, Key: rr.GetKey(), Status: st})
	}
	ops, err := s.h.opts.Contexts.ResourceStatusOps(k.id, updates)
	if err != nil {
		return err
	}
	for i, op := range ops {
		w.add(op, 256+len(updates[i].Status.Error)+len(updates[i].Key))
	}
	prog := progressRecord{Generation: pr.GetGeneration(), Quiet: pr.GetQuiet() || pr.GetSettled(), Settled: pr.GetSettled()}
	if prog.Generation != it.gen || prog == it.progress {
		return nil // about another generation, or nothing new
	}
	data := fmt.Sprintf(`{"generation":%d,"quiet":%t,"settled":%t}`, prog.Generation, prog.Quiet, prog.Settled)
	w.last(clientv3.OpPut(s.h.keys.report(s.ref, k.id, k.app), data), len(data)+128)
	w.progress[k] = prog
	return nil
}

// resourceStatus checks and converts one resource's reported status.
func resourceStatus(rr *pb.ResourceReport) (appcontext.ResourceStatus, error) {
	st := appcontext.ResourceStatus{Status: rr.GetStatus(), Error: rr.GetError(), Warnings: rr.GetWarnings(),
		Manifest: rr.GetManifest(), Attempts: int(rr.GetAttempts()), Fields: rr.GetFields(), Adopted: rr.GetAdopted()}
	switch {
	case !rsyncStatuses[st.Status]:
		return st, fmt.Errorf("status %.40q is not an rsync status", st.Status)
	case len(st.Error) > maxReason || !utf8.ValidString(st.Error):
		return st, fmt.Errorf("its reason is longer than %d bytes or not UTF-8", maxReason)
	case len(st.Warnings) > maxWarnings:
		return st, fmt.Errorf("it has more than %d warnings", maxWarnings)
	case st.Manifest != "" && (len(st.Manifest) != 64 || !isHex(st.Manifest)):
		return st, fmt.Errorf("its manifest is not a sha256")
	case st.Attempts < 0:
		return st, fmt.Errorf("its attempts are negative")
	case len(st.Fields) > maxHash || len(st.Adopted) > maxReason || !utf8.ValidString(st.Adopted):
		return st, fmt.Errorf("its fields hash or former owner is too long or not UTF-8")
	}
	for _, w := range st.Warnings {
		if len(w) > maxReason || !utf8.ValidString(w) {
			return st, fmt.Errorf("a warning is longer than %d bytes or not UTF-8", maxReason)
		}
	}
	if n := rr.GetUpdatedUnixNano(); n > 0 {
		st.Updated = time.Unix(0, n).UTC()
	}
	return st, nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// bundle adds the write of one bundle's snapshot, for the live context
// that places the bundle's app on this cluster; a bundle of nothing the
// cluster's work holds is ignored, as the watcher ignores strangers.
func (s *session) bundle(b *pb.BundleReport, w *writes) {
	id := s.bundleOwner(b.GetStatusId(), b.GetApp())
	if id == "" {
		return
	}
	snap := appcontext.BundleSnapshot{ResourceVersion: b.GetResourceVersion(), Received: s.h.opts.Now().UTC(), Deleted: b.GetDeleted()}
	if !snap.Deleted {
		snap.Status = b.GetStatus()
		if err := watcher.CheckBundle(snap.Status); err != nil {
			s.log.WithError(err).WithField("bundle", fmt.Sprintf("%.64s/%.64s", b.GetNamespace(), b.GetName())).Warn("ResourceBundleState refused")
			snap.Status, snap.Refused = nil, fmt.Sprintf("ResourceBundleState %.64s/%.64s refused: %v", b.GetNamespace(), b.GetName(), err)
		}
	}
	op, err := s.h.opts.Contexts.BundleOp(id, b.GetApp(), s.ref, snap)
	if err != nil {
		return
	}
	w.add(op, len(snap.Status)+256)
}

// bundleOwner is the context a bundle labelled (statusID, app) reports
// for: one whose work on this cluster holds that app, an apply before a
// deletion.
func (s *session) bundleOwner(statusID, app string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := ""
	for k, it := range s.items {
		if k.app != app || it.statusID != statusID {
			continue
		}
		if !it.del {
			return k.id
		}
		owner = k.id
	}
	return owner
}

// nextSeen is when the last-seen time written at at is next due: a
// LastSeenInterval later, but after the session's first write at a
// random point of the interval, so that clusters that connected together
// (a replica's restart, a fleet's start) are not written together and a
// fleet's writes come at an even rate from its start.
func (s *session) nextSeen(at time.Time) time.Time {
	every := s.h.opts.LastSeenInterval
	if s.seenDue.IsZero() {
		return at.Add(rand.N(every) + 1)
	}
	return at.Add(every)
}

// reportedState is the cluster's state after a report: Available, with
// the monitor as the agent says; changed says it is to be written (it
// changed, or its last-seen time is due). Called with stateMu held.
func (s *session) reportedState(m *pb.Monitor) (appcontext.ClusterState, bool) {
	now := s.h.opts.Now().UTC()
	st := s.state
	st.Connectivity, st.UnreachableSince, st.UnusableReason, st.Agent = appcontext.Available, time.Time{}, "", true
	switch m.GetState() {
	case appcontext.MonitorRunning:
		st.Monitor, st.Reason = appcontext.MonitorRunning, ""
	case appcontext.MonitorNotInstalled:
		st.Monitor, st.Reason = appcontext.MonitorNotInstalled, truncate(m.GetReason(), maxReason)
	default:
		if st.Monitor == "" || st.Monitor == appcontext.MonitorSilent {
			st.Monitor, st.Reason = appcontext.MonitorNotInstalled, "the agent has not reported its monitor yet"
		}
	}
	changed := st.Connectivity != s.state.Connectivity || st.Monitor != s.state.Monitor || st.Reason != s.state.Reason ||
		!s.state.UnreachableSince.IsZero() || s.state.UnusableReason != "" || !s.state.Agent
	if !changed && now.Before(s.seenDue) {
		return st, false
	}
	st.LastSeen, st.Updated = now, now
	return st, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// heard restarts the silence timer: the agent is alive.
func (s *session) heard() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.lastHeard = s.h.opts.Now()
	if s.silence != nil {
		s.silence.Reset(s.h.opts.SilentAfter)
	}
}

// heardFor counts the agent heard until d from now (a wait the hub
// imposed on it).
func (s *session) heardFor(d time.Duration) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.lastHeard = s.h.opts.Now().Add(d)
	if s.silence != nil {
		s.silence.Reset(d + s.h.opts.SilentAfter)
	}
}

// wentSilent runs on the silence timer: the sender records it.
func (s *session) wentSilent() {
	s.mu.Lock()
	s.silent = true
	s.mu.Unlock()
	s.signal()
}

// writeSilent records the monitor Silent, unless the agent spoke since.
func (s *session) writeSilent() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.h.opts.Now().Sub(s.lastHeard) < s.h.opts.SilentAfter || s.state.Monitor != appcontext.MonitorRunning {
		return
	}
	st := s.state
	// Heard last then: the stored last-seen time may be a LastSeenInterval
	// older.
	st.LastSeen = s.lastHeard.UTC()
	st.Monitor, st.Reason, st.Updated = appcontext.MonitorSilent, "monitor silent since "+st.LastSeen.Format(time.RFC3339), s.h.opts.Now().UTC()
	op, err := s.h.opts.Contexts.ClusterStateOp(s.ref, st)
	if err != nil {
		return
	}
	if err := s.h.writer.write(s.ctx, s.ref.String(), s.guardCmp(), []clientv3.Op{op}, []int{512}); err != nil {
		s.end(err)
		return
	}
	s.state = st
	s.log.Warn("the agent went silent")
}
