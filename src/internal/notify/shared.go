package notify

import (
	"context"
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// Claims hands work to this replica (ownership.Kind): the manager says
// what exists (Want, Drop) and is called back with what it runs
// (AcquiredSubscription, ReleasedSubscription).
type Claims interface {
	Want(item string)
	Drop(item string)
	// Guard holds while this replica holds item: saves of a delivery state
	// need it.
	Guard(item string) clientv3.Cmp
}

// Subscriptions live in MongoDB, which has no change streams in FerretDB:
// every subscription also has a small marker in etcd, an owned record
// (ownership.Records, one per subscription), which replicas follow to
// learn which subscriptions exist and when one changed.
//
//	<prefix>/subscriptions/<state key>        marker {"gen", "reset"}
//	<prefix>/subscriptions-ready/<state key>  {"gen"}: its owner's worker has its baseline (on the owner's lease)
//
// Every create and change writes a new generation; the subscription's
// owner (re)starts its worker for it, applies the reset the change asks
// for once (the state remembers the generation it took), and acknowledges
// the generation once the worker has its baseline. The API waits for that
// acknowledgement, whichever replica it runs on.
type marker struct {
	Gen   string `json:"gen"`
	Reset string `json:"reset,omitempty"`
}

// Resets a marker asks of the state.
const (
	resetNew        = "new"        // a new subscription: start afresh, sequence from 1
	resetRebaseline = "rebaseline" // filters changed: new baseline, the sequence carries on
)

type ack struct {
	Gen string `json:"gen"`
}

func (m *Manager) markerPrefix() string { return m.opts.Prefix + "/subscriptions/" }
func (m *Manager) ackPrefix() string    { return m.opts.Prefix + "/subscriptions-ready/" }

// parseStateKey reads a subscription's subject and name back from its
// state key (Subject.stateKey).
func parseStateKey(key string) (Subject, string, bool) {
	parts := strings.Split(key, "/")
	switch {
	case parts[0] == SubjectInstance && len(parts) == 3:
		return InstanceSubject(parts[1]), parts[2], true
	case parts[0] == SubjectDIG && len(parts) == 6:
		return DIGSubject(catalog.Key(parts[1:5])), parts[5], true
	}
	return Subject{}, "", false
}

// markerRecords are the subscriptions' markers as owned records, acknowledged
// by the owner once its worker has its baseline.
type markerRecords = ownership.Records[marker, ack]

// newMarkerRecords follows the markers for m: every subscription with a marker
// is wanted (and dropped with it), and the owner is handed the markers of
// the subscriptions it holds.
func newMarkerRecords(m *Manager) (*markerRecords, error) {
	return ownership.NewRecords[marker, ack](ownership.RecordsOptions[marker]{Client: m.opts.States.cli,
		Prefix: m.markerPrefix(), AckPrefix: m.ackPrefix(), Layout: ownership.One, Claims: m.opts.Subscriptions,
		Owner: markerOwner{m}, Lease: m.opts.Lease, Name: "subscription markers", Logger: m.log})
}

// markerOwner hands the markers of owned subscriptions to the manager.
type markerOwner struct{ m *Manager }

func (o markerOwner) Changed(r ownership.Record[marker]) { o.m.markerChanged(r) }

// mark gives every stored subscription without a marker one (a catalogue
// from a release without markers, or a create cut short): its owner then
// resumes it as it is.
func (m *Manager) mark(ctx context.Context) error {
	have, err := m.records.Keys(ctx)
	if err != nil {
		return err
	}
	for _, kind := range []string{SubjectInstance, SubjectDIG} {
		subj := Subject{Kind: kind}
		err := catalog.For[catalog.SubscriptionSpec](m.opts.Catalog, subj.kind()).Each(ctx, func(key catalog.Key, _ catalog.Object[catalog.SubscriptionSpec]) error {
			state := Subject{Kind: kind, Key: key[:len(key)-1]}.stateKey(key.Name())
			if have[state] {
				return nil
			}
			_, err := m.records.Create(ctx, state, marker{Gen: newID()})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// follow follows the markers until ctx ends; ready is closed once every
// marker was seen.
func (m *Manager) follow(ctx context.Context) {
	m.tasks.Go(func() { _ = m.records.Run(ctx) })
	select {
	case <-m.records.Ready():
	case <-ctx.Done():
		return
	}
	close(m.ready)
	<-ctx.Done()
}

// markerChanged is told a marker of a subscription this replica holds (or
// its deletion): the worker follows it.
func (m *Manager) markerChanged(r ownership.Record[marker]) {
	m.mu.Lock()
	if r.Deleted {
		delete(m.markers, r.Key)
	} else {
		m.markers[r.Key] = r.Value
	}
	m.mu.Unlock()
	m.tasks.Go(func() { m.reconcile(r.Key) })
}

// AcquiredSubscription runs a subscription's worker here (see Claims):
// its marker is read and the worker started for it.
func (m *Manager) AcquiredSubscription(key string) {
	m.mu.Lock()
	m.owned[key] = true
	m.mu.Unlock()
	m.records.Acquired(key)
}

// ReleasedSubscription stops a subscription's worker here; it returns
// once the worker stopped, so its next owner never overlaps with it.
func (m *Manager) ReleasedSubscription(key string) {
	m.records.Released(key)
	m.mu.Lock()
	delete(m.owned, key)
	delete(m.markers, key)
	m.mu.Unlock()
	m.ops.Lock()
	m.stopWorker(key)
	m.ops.Unlock()
	ctx := m.tasks.Context()
	if ctx == nil || ctx.Err() != nil {
		return // shutting down: the acknowledgement goes with the lease
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.records.Unack(ctx, key); err != nil {
		m.log.WithError(err).WithField("subscription", key).Warn("cannot withdraw a subscription's acknowledgement")
	}
}

func (m *Manager) stopWorker(key string) {
	m.stop(key)
	m.mu.Lock()
	delete(m.running, key)
	m.mu.Unlock()
}

// reconcile makes the subscription's worker run for its marker's
// generation while this replica owns it, and not otherwise.
func (m *Manager) reconcile(key string) {
	m.ops.Lock()
	defer m.ops.Unlock()
	m.mu.Lock()
	owned := m.owned[key]
	mk, known := m.markers[key]
	gen, running := m.running[key]
	m.mu.Unlock()
	ctx := m.tasks.Context()
	if !owned || !known {
		if running {
			m.stopWorker(key)
		}
		return
	}
	if running && gen == mk.Gen {
		return
	}
	if running {
		m.stopWorker(key)
	}
	err := m.startOwned(ctx, key, mk)
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrNotOwner) {
		return
	}
	m.log.WithError(err).WithField("subscription", key).Warn("cannot start the subscription's worker; retrying")
	m.tasks.Go(func() {
		if backoff.Sleep(ctx, ScaledBackoff(m.opts.BackoffBase, 1)) {
			m.reconcile(key)
		}
	})
}

// startOwned applies the marker's reset (once per generation) and starts
// the worker; its generation is acknowledged once the worker has its
// baseline.
func (m *Manager) startOwned(ctx context.Context, key string, mk marker) error {
	subj, name, ok := parseStateKey(key)
	if !ok {
		return nil
	}
	obj, err := m.resource(subj).Get(ctx, m.key(subj, name))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // a marker left by a delete cut short; nothing to deliver
	}
	if err != nil {
		return err
	}
	if mk.Reset != "" {
		st, found, err := m.opts.States.Load(ctx, key)
		if err != nil {
			return err
		}
		if st.Gen != mk.Gen {
			if mk.Reset == resetNew || !found {
				st = State{}
			}
			st.Gen, st.Rebaseline = mk.Gen, true
			if err := m.opts.States.SaveIf(ctx, key, st, m.opts.Subscriptions.Guard(key)); err != nil {
				return err
			}
		}
	}
	h := m.start(subj, Subscription{Name: name, SubscriptionSpec: obj.Spec})
	m.mu.Lock()
	m.running[key] = mk.Gen
	m.mu.Unlock()
	m.tasks.Go(func() {
		select {
		case <-h.w.Ready():
		case <-h.done:
			return
		}
		m.mu.Lock()
		current := m.owned[key] && m.running[key] == mk.Gen
		m.mu.Unlock()
		if !current {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.records.Ack(actx, key, ack{Gen: mk.Gen}); err != nil && ctx.Err() == nil {
			m.log.WithError(err).WithField("subscription", key).Warn("cannot acknowledge a subscription")
		}
	})
	return nil
}

// putMarker writes a new generation of a subscription's marker.
func (m *Manager) putMarker(ctx context.Context, key, reset string) (string, error) {
	gen := newID()
	if _, err := m.records.Put(ctx, key, marker{Gen: gen, Reset: reset}); err != nil {
		return "", errdefs.Unavailable(err, "cannot record the subscription for its owner")
	}
	return gen, nil
}

// deleteMarkers removes a subscription's marker, or every marker under a
// subject's prefix.
func (m *Manager) deleteMarkers(ctx context.Context, key string, prefix bool) error {
	if err := m.records.Delete(ctx, key, prefix); err != nil {
		return errdefs.Unavailable(err, "cannot withdraw the subscription from its owner")
	}
	return nil
}

// waitAck returns once the subscription's owner acknowledged generation
// gen (its worker has its baseline), or a newer generation replaced it.
func (m *Manager) waitAck(ctx context.Context, key, gen string) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.AckWait)
	defer cancel()
	err := m.records.Wait(ctx, key, false, func(st ownership.State[marker, ack]) bool {
		var mk marker
		if len(st.Records) > 0 {
			mk = st.Records[0].Value
		}
		return st.Acks[key].Value.Gen == gen || mk.Gen != gen
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errdefs.Unavailable(ctx.Err(), "the subscription is stored, but no replica started its worker within %s", m.opts.AckWait)
	default:
		return errdefs.Unavailable(err, "cannot tell whether the subscription's worker started")
	}
}

// waitAcksGone returns once no owner acknowledges the subscription (or
// any under a prefix) any more: their workers stopped. A dead owner's
// acknowledgements go with its lease.
func (m *Manager) waitAcksGone(ctx context.Context, key string, prefix bool) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.AckWait)
	defer cancel()
	if err := m.records.Wait(ctx, key, prefix, func(st ownership.State[marker, ack]) bool { return len(st.Acks) == 0 }); err != nil {
		m.log.WithField("subscription", key).Warn("a subscription's worker was not seen to stop in time")
	}
}
