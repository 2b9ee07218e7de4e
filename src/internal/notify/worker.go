package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Source computes a subscription's current view: one Entry per resource,
// in runs that are never changed once handed out (Runs), and the rest of
// the payload (instance id, ready, status fields...), a value that
// marshals to a JSON object.
type Source func(ctx context.Context) (entries Runs, envelope any, err error)

// Sender delivers one frozen payload; *Deliverer POSTs it to a callback.
type Sender interface {
	Deliver(ctx context.Context, d Delivery) Result
}

// Headed is an envelope whose own fields matter: HeadDigest changes when
// they do.
type Headed interface {
	HeadDigest() string
}

func headOf(envelope any) string {
	if h, ok := envelope.(Headed); ok {
		return h.HeadDigest()
	}
	return ""
}

// WorkerOptions configures one subscription's worker.
type WorkerOptions struct {
	// Key identifies the subscription in the state store.
	Key string
	// URL and Secret of the callback.
	URL, Secret string
	// MinInterval is the least time between two POSTs; changes in between
	// are coalesced into the next one.
	MinInterval time.Duration
	Source      Source
	States      *States
	Deliverer   Sender
	// Metrics, when set, counts attempts and deliveries.
	Metrics *Metrics
	// BackoffBase scales the retry backoff for tests; 0 means Backoff as is.
	BackoffBase time.Duration
	// Guard, when set, is a condition every save of the state needs: the
	// claim that makes this replica the owner. A save it refuses stops
	// the worker, so a replica that lost the subscription without noticing
	// (paused past its lease) never gives out a sequence number.
	Guard  func() clientv3.Cmp
	Logger *logrus.Entry
	Now    func() time.Time
}

// Worker delivers one subscription's changes. It is woken by Notify and
// does nothing on its own: there is no polling loop.
type Worker struct {
	opts    WorkerOptions
	log     *logrus.Entry
	trigger chan struct{}
	ready   chan struct{}
	// changed is when the first change not yet frozen was signalled
	// (UnixNano; 0 when none).
	changed atomic.Int64
	// pendingOn is what this worker adds to the pending gauge.
	pendingOn bool
	// fresh is the ID of the pending payload this worker froze itself:
	// only of that one does it know for sure whether it was POSTed (a
	// stored Attempts is saved after the POST, and that save can fail).
	fresh string
	// clean names the runs known to match the delivered digests entry for
	// entry, which a freeze skips; frozen, the runs of the payload fresh
	// names, which match once it is delivered. Both are in memory only: a
	// new worker compares everything once.
	clean, frozen runSet
}

// save stores the state under the worker's guard.
func (w *Worker) save(ctx context.Context, st State) error {
	if w.opts.Guard != nil {
		return w.opts.States.SaveIf(ctx, w.opts.Key, st, w.opts.Guard())
	}
	return w.opts.States.Save(ctx, w.opts.Key, st)
}

// saveDelivered stores the state with the delivered digests of the
// clusters touched names (all of them when all is set).
func (w *Worker) saveDelivered(ctx context.Context, st State, touched []string, all bool) error {
	var guards []clientv3.Cmp
	if w.opts.Guard != nil {
		guards = append(guards, w.opts.Guard())
	}
	return w.opts.States.saveDelivered(ctx, w.opts.Key, st, touched, all, guards)
}

func (w *Worker) setPending(on bool) {
	if on != w.pendingOn {
		w.pendingOn = on
		w.opts.Metrics.pending(on)
	}
}

// NewWorker returns a worker; Run starts it.
func NewWorker(opts WorkerOptions) (*Worker, error) {
	if opts.Key == "" || opts.Source == nil || opts.States == nil || opts.Deliverer == nil {
		return nil, errors.New("notify: Key, Source, States and Deliverer are required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Worker{opts: opts, log: opts.Logger.WithField("subscription", opts.Key),
		trigger: make(chan struct{}, 1), ready: make(chan struct{}), clean: runSet{}, frozen: runSet{}}, nil
}

// Ready is closed once the worker knows its baseline: changes after that
// are delivered.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Notify says something may have changed. It never blocks: a wake-up
// already queued stands for any number of changes.
func (w *Worker) Notify() {
	w.changed.CompareAndSwap(0, w.opts.Now().UnixNano())
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends. A new subscription's baseline is the current
// state (no initial POST); a pending delivery left by an earlier process is
// resent first.
func (w *Worker) Run(ctx context.Context) error {
	var st State
	for attempt := 1; ; attempt++ {
		var err error
		if st, err = w.start(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrNotOwner) {
			w.log.Info("the subscription went to another replica")
			return nil
		}
		// The stores or the subject may be briefly unavailable; a worker
		// that gave up would silently drop the subscription.
		w.log.WithError(err).Warn("cannot start the subscription's worker; retrying")
		if !backoff.Sleep(ctx, w.backoff(attempt)) {
			return nil
		}
	}
	w.setPending(st.Pending != nil)
	defer w.setPending(false) // the gauge counts this process's work
	close(w.ready)
	failures := 0
	for {
		if st.Pending != nil {
			if err := w.deliver(ctx, &st); err != nil {
				return nil // ctx ended or the subscription moved; the pending delivery stays for its next worker
			}
		}
		if wait := st.LastNotify.Add(w.opts.MinInterval).Sub(w.opts.Now()); wait > 0 {
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.trigger:
		}
		if err := w.freeze(ctx, &st); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrNotOwner) {
				w.log.Info("the subscription went to another replica")
				return nil
			}
			// A store hiccup must not lose the change: try again after a
			// backoff, as if it had just been signalled.
			failures++
			w.log.WithError(err).Warn("cannot compute the subscription's changes; retrying")
			if !backoff.Sleep(ctx, w.backoff(failures)) {
				return nil
			}
			w.Notify()
			continue
		}
		failures = 0
	}
}

// start loads the delivery state, or makes a new subscription's baseline.
func (w *Worker) start(ctx context.Context) (State, error) {
	st, found, err := w.opts.States.Load(ctx, w.opts.Key)
	if err != nil {
		return st, err
	}
	if err := w.opts.States.thaw(ctx, w.opts.Key, st.Pending); errors.Is(err, ErrFrozenLost) {
		w.drop(&st, err)
	} else if err != nil {
		return st, err
	}
	if found && !st.Rebaseline {
		if err := w.resume(ctx, &st); err != nil {
			return st, err
		}
		// Changes signalled to the previous worker (or process) but not yet
		// frozen left no trace: look once for anything not delivered.
		w.Notify()
		return st, nil
	}
	entries, envelope, err := w.opts.Source(ctx)
	if err != nil {
		return st, err
	}
	st.Delivered = digestsOf(entries)
	w.clean.reset(entries)
	st.Head, st.Rebaseline, st.byShard = headOf(envelope), false, nil
	if st.Pending != nil {
		// Changed filters while a payload waited for its 2xx: it is still
		// sent, under its sequence number, and once it is the subscriber
		// is at the new baseline (what the new filters see now).
		st.Pending.Delta, st.Pending.Gone, st.Pending.DeltaRef, st.Pending.NextHead = nil, nil, nil, st.Head
	}
	if st.Created.IsZero() {
		st.Created = w.opts.Now().UTC()
	}
	if err := w.saveDelivered(ctx, st, nil, true); err != nil {
		return st, err
	}
	return st, nil
}

// resume completes a state another process left: digests still in an
// earlier version's layout go to their shards, and a pending payload an
// earlier version saved without its envelope (it kept none over 64 KiB)
// gets a fresh one around its frozen changes (same id and sequence).
func (w *Worker) resume(ctx context.Context, st *State) error {
	if st.legacy {
		if err := w.saveDelivered(ctx, *st, nil, true); err != nil {
			return err
		}
		st.legacy = false
	}
	if p := st.Pending; p != nil && p.Body == nil && p.Envelope == nil && p.EnvelopeRef == nil {
		_, envelope, err := w.opts.Source(ctx)
		if err != nil {
			return err
		}
		if p.Envelope, err = marshalEnvelope(envelope); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) backoff(attempt int) time.Duration {
	return ScaledBackoff(w.opts.BackoffBase, attempt)
}

// ScaledBackoff is Backoff with its 1 s base replaced by base (tests); 0
// keeps it.
func ScaledBackoff(base time.Duration, attempt int) time.Duration {
	if base <= 0 {
		base = time.Second
	}
	return deliveryBackoff(base).Delay(attempt)
}

// freeze computes the changes since the last delivered state and, if
// there are any, stores them as the pending payload under a new sequence
// number before anything is sent.
func (w *Worker) freeze(ctx context.Context, st *State) error {
	changedAt := time.Unix(0, w.changed.Swap(0))
	entries, envelope, err := w.opts.Source(ctx)
	if err != nil {
		return err
	}
	changes, delta, gone := diffDelta(st.Delivered, entries, w.clean, DeletedPayload)
	head := headOf(envelope)
	if changes.Empty() && head == st.Head {
		w.clean.reset(entries) // no delta, nothing gone: every run matches
		return nil
	}
	env, err := marshalEnvelope(envelope)
	if err != nil {
		return err
	}
	ch, err := marshalChanges(changes)
	if err != nil {
		return err
	}
	st.Sequence++
	now := w.opts.Now().UTC()
	st.Pending = &Pending{ID: newID(), Sequence: st.Sequence, Timestamp: now, ChangedAt: changedAt.UTC(),
		Changes: ch, Envelope: env, Delta: delta, Gone: gone, NextHead: head}
	st.LastUpdate = now
	st.Attempts, st.LastError = 0, ""
	if err := w.save(ctx, *st); err != nil {
		return err
	}
	w.fresh = st.Pending.ID
	w.frozen.reset(entries)
	w.setPending(true)
	return nil
}

func marshalEnvelope(envelope any) ([]byte, error) {
	if envelope == nil {
		envelope = struct{}{}
	}
	return json.Marshal(envelope)
}

func marshalChanges(changes Changes) ([]byte, error) {
	return json.Marshal(struct {
		Changes Changes `json:"resource-changes"`
	}{changes})
}

// payload is the envelope's JSON object with "resource-changes" added.
func payload(envelope any, changes Changes) ([]byte, error) {
	env, err := marshalEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	ch, err := marshalChanges(changes)
	if err != nil {
		return nil, err
	}
	return mergeObjects(env, ch)
}

// mergeObjects joins two JSON objects' fields, a's first.
func mergeObjects(a, b []byte) ([]byte, error) {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	for _, o := range [][]byte{a, b} {
		if len(o) < 2 || o[0] != '{' || o[len(o)-1] != '}' {
			return nil, errors.New("notify: not a JSON object")
		}
	}
	emptyA, emptyB := len(bytes.TrimSpace(a[1:len(a)-1])) == 0, len(bytes.TrimSpace(b[1:len(b)-1])) == 0
	switch {
	case emptyB:
		return a, nil
	case emptyA:
		return b, nil
	}
	out := make([]byte, 0, len(a)+len(b))
	out = append(out, a[:len(a)-1]...)
	out = append(out, ',')
	return append(out, b[1:]...), nil
}

// deliver sends the pending payload until it is answered: 2xx moves the
// delivered state forward; another 4xx is recorded and the payload dropped
// (the delivered state stays, so its changes come again with the next);
// anything else is retried with backoff. It returns an error only when ctx
// ended.
func (w *Worker) deliver(ctx context.Context, st *State) error {
	p := st.Pending
	body, err := p.payload()
	if err != nil {
		w.drop(st, err)
		return nil
	}
	for {
		res := w.opts.Deliverer.Deliver(ctx, Delivery{URL: w.opts.URL, ID: p.ID, Sequence: p.Sequence,
			Timestamp: p.Timestamp, Body: body, Secret: w.opts.Secret})
		st.Attempts++
		st.LastStatus = strconv.Itoa(res.Status)
		if res.Status == 0 {
			st.LastStatus = "error"
		}
		// Shown to API callers: a status code or a short reason, never
		// the receiver's body or the callback URL.
		st.LastError = Reason(res)
		if res.Err != nil {
			// The detail is for operators; the URL (which may carry a
			// token) is left out.
			detail := res.Err
			var urlErr *url.Error
			if errors.As(detail, &urlErr) {
				detail = urlErr.Err
			}
			w.log.WithError(detail).WithField("outcome", res.Outcome.String()).Debug("delivery attempt failed")
		}
		w.opts.Metrics.attempt(res.Outcome)
		switch res.Outcome {
		case Delivered:
			st.indexShards()
			st.delivered(p)
			w.deliveredRuns(p)
			st.Head, st.Pending = p.NextHead, nil
			st.LastNotify = w.opts.Now().UTC()
			if !p.ChangedAt.IsZero() && p.ChangedAt.Unix() > 0 {
				w.opts.Metrics.latency(w.opts.Now().Sub(p.ChangedAt))
			}
		case Failed:
			st.Pending = nil
			st.LastNotify = w.opts.Now().UTC()
			w.log.WithField("status", res.Status).Warn("callback refused the notification")
		}
		// The answer must be recorded even when the worker is being stopped,
		// but an etcd outage must not hold the stop forever.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if res.Outcome == Delivered {
			err = w.saveDelivered(sctx, *st, p.touched(), false)
		} else {
			err = w.save(sctx, *st)
		}
		cancel()
		if errors.Is(err, ErrNotOwner) {
			// The new owner resends the pending payload under the same
			// sequence number: a repeat, never a gap.
			return err
		}
		if err != nil {
			w.log.WithError(err).Error("cannot save delivery state")
		}
		if st.Pending == nil {
			w.setPending(false)
			return nil
		}
		if !backoff.Sleep(ctx, w.backoff(st.Attempts)) {
			return ctx.Err()
		}
	}
}

// deliveredRuns follows the delivered digests' move to p: the runs p was
// frozen from match them now. Of a payload another worker froze (resent
// after a restart or a hand-over) no run is known to match.
func (w *Worker) deliveredRuns(p *Pending) {
	if p.ID == w.fresh {
		w.clean, w.frozen = w.frozen, w.clean
	} else {
		clear(w.clean)
	}
	clear(w.frozen)
}

// drop gives up a stored pending payload that cannot be assembled (not
// JSON objects, or a part whose chunks are missing or corrupt): its
// changes come again with the next. The next takes its sequence number
// (no gap) only when this worker froze it and never POSTed it; a
// subscriber that may have received a body under a number never gets
// another under it, so otherwise the next moves on (a gap, never a
// different repeat). A payload loaded from etcd may have been POSTed
// whatever its stored Attempts says (saved after the POST, and that save
// fails on a hand-over or an etcd outage).
func (w *Worker) drop(st *State, err error) {
	w.log.WithError(err).WithField("attempts", st.Attempts).
		Error("cannot assemble the pending payload; its changes come with the next")
	st.Sequence = st.Pending.Sequence
	if st.Attempts == 0 && st.Pending.ID == w.fresh {
		st.Sequence--
	}
	st.Pending = nil
	w.setPending(false)
	w.Notify()
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
