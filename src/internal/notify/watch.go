package notify

import (
	"context"
	"maps"
)

// Watch follows a subject's changes for one Server-Sent Events stream. It
// keeps its last-sent digests in memory: a stream that breaks resumes with
// a fresh snapshot, which carries everything.
type Watch struct {
	m       *Manager
	subj    Subject
	sub     Subscription
	trigger chan struct{}
	unlist  func()
	last    map[string]string
	seq     int64
}

// Watch starts following subj with a subscription's filters (sub carries
// them; its name and URL are unused). Sequence numbers continue after
// lastSeq. Close it when the stream ends.
func (m *Manager) Watch(subj Subject, sub Subscription, lastSeq int64) *Watch {
	w := &Watch{m: m, subj: subj, sub: sub, trigger: make(chan struct{}, 1), seq: lastSeq}
	w.unlist = m.listen(subj.Group(), func() {
		select {
		case w.trigger <- struct{}{}:
		default:
		}
	})
	return w
}

// Baseline takes the current view as what the client has (its snapshot)
// and returns the next sequence number, the snapshot's.
func (w *Watch) Baseline(ctx context.Context) (int64, error) {
	entries, _, err := w.m.source(w.subj, w.sub)(ctx)
	if err != nil {
		return 0, err
	}
	w.last = digestsOf(entries)
	w.seq++
	return w.seq, nil
}

// Changed signals that Next may have something.
func (w *Watch) Changed() <-chan struct{} { return w.trigger }

// Next returns the event for what changed since the last one, or ok false
// when nothing the client sees did.
func (w *Watch) Next(ctx context.Context) (seq int64, data []byte, ok bool, err error) {
	entries, envelope, err := w.m.source(w.subj, w.sub)(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	changes, delta, gone := diffDelta(w.last, entries, nil, DeletedPayload)
	if changes.Empty() {
		return 0, nil, false, nil
	}
	data, err = payload(envelope, changes)
	if err != nil {
		return 0, nil, false, err
	}
	maps.Copy(w.last, delta)
	for _, key := range gone {
		delete(w.last, key)
	}
	w.seq++
	return w.seq, data, true, nil
}

// Close stops following.
func (w *Watch) Close() { w.unlist() }
