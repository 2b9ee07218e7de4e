package rsync

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
)

// recorder writes one action's resource statuses to etcd, batched: while a
// write is in flight, new statuses collect (the latest per resource wins)
// and go out together in the next one, so a hundred resources applied at
// once cost a few transactions, not a hundred. It also keeps every
// resource's current status and derives the context's status from them.
type recorder struct {
	store *appcontext.Store
	id    string
	log   *logrus.Entry
	names statusNames

	mu       sync.Mutex
	pending  map[string]appcontext.StatusUpdate
	current  map[string]resState
	passDone bool // every placement made its first pass: the status may say more than "running"
	written  *appcontext.Status
	// seq counts what was queued (statuses, the first pass); flushed is
	// the seq the last successful write covered, and flushedCh is closed
	// (and replaced) at each such write, for sync.
	seq, flushed uint64
	flushedCh    chan struct{}
	wake         chan struct{}
	finished     chan struct{}

	// proc ends when the process stops (the engine's context); ending
	// also ends when finish is called. Once ending is done, failed writes
	// are retried only until finalWait has passed, and not at all once
	// the process stops: finish, and any shutdown waiting on it, never
	// waits longer on a store that refuses writes.
	proc      context.Context
	ending    context.Context
	end       context.CancelFunc
	finalWait time.Duration
	deadline  time.Time // set by run when ending is done; read by finish after finished
}

// finalFlushTimeout bounds the writes of an action's last statuses, every
// attempt together, once the action finished or the process stops.
const finalFlushTimeout = 30 * time.Second

// resState is a resource's latest status, with what the context's status
// needs to say about it.
type resState struct {
	status, reason, where string
	removed               bool
	// hook: a Helm hook, which runs only at its events; it counts only
	// when it failed.
	hook bool
}

// statusNames are the context statuses of one kind of action.
type statusNames struct{ running, done, failed string }

var (
	applyNames  = statusNames{appcontext.Instantiating, appcontext.Instantiated, appcontext.InstantiateFailed}
	updateNames = statusNames{appcontext.Updating, appcontext.Updated, appcontext.UpdateFailed}
	deleteNames = statusNames{appcontext.Terminating, appcontext.Terminated, appcontext.TerminateFailed}
)

// newRecorder starts a recorder for context c; proc ends when the process
// stops, finalWait bounds the last writes (see recorder.finalWait).
func newRecorder(proc context.Context, store *appcontext.Store, c *appcontext.Context, names statusNames, log *logrus.Entry, finalWait time.Duration) *recorder {
	r := &recorder{store: store, id: c.Meta.ID, log: log, names: names,
		pending: map[string]appcontext.StatusUpdate{}, current: map[string]resState{}, flushedCh: make(chan struct{}),
		wake: make(chan struct{}, 1), finished: make(chan struct{}), proc: proc, finalWait: finalWait}
	r.ending, r.end = context.WithCancel(proc)
	for _, p := range c.Placements {
		for _, res := range p.Resources {
			st := p.StatusOf(res.Key())
			r.current[recKey(p, res.Key())] = resState{status: st.Status, reason: st.Error, where: where(p, res.Key()), removed: res.Removed,
				hook: res.Hook != nil}
		}
	}
	go r.run()
	return r
}

func recKey(p *appcontext.Placement, key string) string {
	return p.App + "\x00" + p.Cluster.String() + "\x00" + key
}

func where(p *appcontext.Placement, key string) string {
	return p.App + " on " + p.Cluster.String() + ": " + key
}

// record queues a resource's status; it never blocks.
func (r *recorder) record(p *appcontext.Placement, key string, st appcontext.ResourceStatus) {
	if st.Updated.IsZero() {
		st.Updated = time.Now().UTC()
	}
	k := recKey(p, key)
	r.mu.Lock()
	r.pending[k] = appcontext.StatusUpdate{App: p.App, Cluster: p.Cluster, Key: key, Status: st}
	cur := r.current[k]
	cur.status, cur.reason, cur.where = st.Status, st.Error, where(p, key)
	r.current[k] = cur
	r.seq++
	r.mu.Unlock()
	r.signal()
}

// firstPassDone lets the context's status reflect what happened.
func (r *recorder) firstPassDone() {
	r.mu.Lock()
	r.passDone = true
	r.seq++
	r.mu.Unlock()
	r.signal()
}

// sync waits until what was queued before it is written (the context's
// status included), or ctx ends, or the recorder stops: a caller told of
// the first pass reads it from etcd.
func (r *recorder) sync(ctx context.Context) {
	r.mu.Lock()
	target := r.seq
	for r.flushed < target {
		ch := r.flushedCh
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-r.finished:
			return
		}
		r.mu.Lock()
	}
	r.mu.Unlock()
}

func (r *recorder) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// finish writes what is pending and, unless the action was cancelled, the
// context's final status; then the recorder stops.
func (r *recorder) finish(cancelled bool) {
	r.mu.Lock()
	if !cancelled {
		r.passDone = true
	}
	r.mu.Unlock()
	r.end()
	<-r.finished
	if cancelled {
		return // who cancelled says what the context's status is
	}
	st := r.derive(true)
	ctx, cancel := context.WithDeadline(context.Background(), r.deadline)
	defer cancel()
	if err := r.store.SetStatus(ctx, r.id, st); err != nil {
		r.log.WithError(err).Error("cannot record the context's status")
	}
}

// run writes batches until finish.
func (r *recorder) run() {
	defer close(r.finished)
	for {
		select {
		case <-r.wake:
		case <-r.ending.Done():
		}
		stopping := r.ending.Err() != nil
		if stopping {
			r.deadline = time.Now().Add(r.finalWait)
		}
		r.flushRetrying(stopping)
		if stopping {
			return
		}
	}
}

// flushRetrying writes what is pending until a write succeeds. A failed
// write is retried with backoff while the action runs; the wait ends early
// when the action finishes or the process stops, and the next attempt is
// then the final flush. Once stopping, every attempt shares the deadline
// and none follows the deadline or the process's stop.
func (r *recorder) flushRetrying(stopping bool) {
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(r.ending, 30*time.Second) // a write in flight at finish gives way to the final flush
		if stopping {
			ctx, cancel = context.WithDeadline(context.Background(), r.deadline)
		}
		err := r.flush(ctx, stopping)
		cancel()
		if err == nil {
			return
		}
		r.log.WithError(err).WithField("attempt", attempt).Warn("cannot record rsync statuses; retrying")
		if stopping && (r.proc.Err() != nil || !time.Now().Before(r.deadline)) {
			r.log.Error("giving up recording rsync statuses")
			return
		}
		wait := backoff.Backoff{Base: 200 * time.Millisecond, Step: 200 * time.Millisecond, Max: 5 * time.Second}.Delay(attempt)
		if stopping {
			backoff.Sleep(r.proc, min(wait, time.Until(r.deadline)))
			continue
		}
		if !backoff.Sleep(r.ending, wait) {
			return // run makes the final flush
		}
	}
}

// flush writes the pending statuses, and the derived context status when
// it changed (not while stopping: finish writes the final one).
func (r *recorder) flush(ctx context.Context, stopping bool) error {
	r.mu.Lock()
	upTo := r.seq
	updates := make([]appcontext.StatusUpdate, 0, len(r.pending))
	for _, u := range r.pending {
		updates = append(updates, u)
	}
	r.pending = map[string]appcontext.StatusUpdate{}
	var ctxStatus *appcontext.Status
	if r.passDone && !stopping {
		st := r.deriveLocked(false)
		if r.written == nil || !sameStatus(*r.written, st) {
			ctxStatus = &st
		}
	}
	r.mu.Unlock()
	if len(updates) == 0 && ctxStatus == nil {
		r.markFlushed(upTo)
		return nil
	}
	if err := r.store.SetResourceStatuses(ctx, r.id, updates, ctxStatus); err != nil {
		r.mu.Lock()
		for _, u := range updates { // put back unless something newer came
			k := u.App + "\x00" + u.Cluster.String() + "\x00" + u.Key
			if _, newer := r.pending[k]; !newer {
				r.pending[k] = u
			}
		}
		r.mu.Unlock()
		return err
	}
	if ctxStatus != nil {
		r.mu.Lock()
		r.written = ctxStatus
		r.mu.Unlock()
	}
	r.markFlushed(upTo)
	return nil
}

// markFlushed records that what was queued up to seq is written.
func (r *recorder) markFlushed(seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq > r.flushed {
		r.flushed = seq
		close(r.flushedCh)
		r.flushedCh = make(chan struct{})
	}
}

func sameStatus(a, b appcontext.Status) bool {
	return a.Status == b.Status && a.Error == b.Error && a.Active == b.Active && strings.Join(a.Reasons, "\n") == strings.Join(b.Reasons, "\n")
}

func (r *recorder) derive(final bool) appcontext.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deriveLocked(final)
}

// maxReasons is how many resources' reasons a context's status names.
const maxReasons = 5

// deriveLocked is the context's status from its resources': failed as soon
// as one Failed; running while any is Pending, Retrying or Waiting (with
// what they wait for); done when all are. final: the action ended.
func (r *recorder) deriveLocked(final bool) appcontext.Status {
	counts := map[string]int{}
	var failed, open []resState
	total := 0
	for _, s := range r.current {
		if s.hook && s.status != appcontext.RsyncFailed {
			continue // a hook not run, or run as it should
		}
		want := appcontext.RsyncApplied
		if r.names == deleteNames || s.removed {
			want = appcontext.RsyncDeleted
		}
		total++
		counts[s.status]++
		switch s.status {
		case want:
		case appcontext.RsyncFailed:
			failed = append(failed, s)
		default:
			open = append(open, s)
		}
	}
	byWhere := func(l []resState) {
		sort.Slice(l, func(i, j int) bool { return l[i].where < l[j].where })
	}
	byWhere(failed)
	byWhere(open)
	st := appcontext.Status{Status: r.names.running}
	var parts []string
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d resources failed", len(failed), total))
	}
	for _, s := range []string{appcontext.RsyncWaiting, appcontext.RsyncRetrying} {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(s)))
		}
	}
	st.Error = strings.Join(parts, ", ")
	for _, s := range append(failed, open...) {
		if len(st.Reasons) == maxReasons {
			break
		}
		if s.reason != "" {
			st.Reasons = append(st.Reasons, s.where+": "+s.status+": "+s.reason)
		}
	}
	switch {
	case len(failed) > 0:
		st.Status, st.Active = r.names.failed, !final && len(open) > 0
	case len(open) == 0 || final:
		st.Status = r.names.done
		if len(open) > 0 { // ended with work undone (should not happen)
			st.Status = r.names.failed
		}
	}
	return st
}
