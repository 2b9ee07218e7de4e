package notify

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
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
// every subscription also has a small marker in etcd, which replicas watch
// to learn which subscriptions exist and when one changed.
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

// mark gives every stored subscription without a marker one (a catalogue
// from a release without markers, or a create cut short): its owner then
// resumes it as it is.
func (m *Manager) mark(ctx context.Context) error {
	resp, err := m.opts.States.cli.Get(ctx, m.markerPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[strings.TrimPrefix(string(kv.Key), m.markerPrefix())] = true
	}
	for _, kind := range []string{SubjectInstance, SubjectDIG} {
		subj := Subject{Kind: kind}
		err := catalog.For[catalog.SubscriptionSpec](m.opts.Catalog, subj.kind()).Each(ctx, func(key catalog.Key, _ catalog.Object[catalog.SubscriptionSpec]) error {
			state := Subject{Kind: kind, Key: key[:len(key)-1]}.stateKey(key.Name())
			if have[state] {
				return nil
			}
			data, _ := json.Marshal(marker{Gen: newID()})
			k := m.markerPrefix() + state
			_, err := m.opts.States.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, string(data))).Commit()
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// loadMarkers reads every marker, wants each subscription, and returns
// the revision to watch from.
func (m *Manager) loadMarkers(ctx context.Context) (int64, error) {
	resp, err := m.opts.States.cli.Get(ctx, m.markerPrefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	markers := map[string]marker{}
	for _, kv := range resp.Kvs {
		var mk marker
		if json.Unmarshal(kv.Value, &mk) == nil {
			markers[strings.TrimPrefix(string(kv.Key), m.markerPrefix())] = mk
		}
	}
	m.mu.Lock()
	gone := map[string]bool{}
	for key := range m.markers {
		if _, ok := markers[key]; !ok {
			gone[key] = true
		}
	}
	m.markers = markers
	var owned []string
	for key := range m.owned {
		owned = append(owned, key)
	}
	m.mu.Unlock()
	for key := range gone {
		m.opts.Subscriptions.Drop(key)
	}
	for key := range markers {
		m.opts.Subscriptions.Want(key)
	}
	for _, key := range owned {
		m.goOwned(func() { m.reconcile(key) })
	}
	return resp.Header.Revision, nil
}

// followMarkers follows markers until ctx ends; a broken watch is resumed
// from a fresh read.
func (m *Manager) followMarkers(ctx context.Context, rev int64) error {
	for {
		err := m.watchMarkers(ctx, rev)
		if ctx.Err() != nil {
			return nil
		}
		m.log.WithError(err).Warn("subscription marker watch ended; resuming")
		for attempt := 1; ; attempt++ {
			if !backoff.Sleep(ctx, min(time.Duration(attempt)*time.Second, 10*time.Second)) {
				return nil
			}
			if rev, err = m.loadMarkers(ctx); err == nil {
				break
			}
		}
	}
}

func (m *Manager) watchMarkers(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cli := m.opts.States.cli
	markers := cli.Watch(clientv3.WithRequireLeader(wctx), m.markerPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case r, ok := <-markers:
			if !ok {
				return errors.New("marker watch closed")
			}
			if err := r.Err(); err != nil {
				return err
			}
			for _, ev := range r.Events {
				m.markerChanged(strings.TrimPrefix(string(ev.Kv.Key), m.markerPrefix()), ev)
			}
		}
	}
}

func (m *Manager) markerChanged(key string, ev *clientv3.Event) {
	if ev.Type == mvccpb.DELETE {
		m.mu.Lock()
		delete(m.markers, key)
		m.mu.Unlock()
		m.opts.Subscriptions.Drop(key) // its owner releases it: the worker stops
		return
	}
	var mk marker
	if err := json.Unmarshal(ev.Kv.Value, &mk); err != nil {
		m.log.WithField("key", key).Warn("skipping a malformed subscription marker")
		return
	}
	m.mu.Lock()
	m.markers[key] = mk
	owned := m.owned[key]
	m.mu.Unlock()
	m.opts.Subscriptions.Want(key)
	if owned {
		m.goOwned(func() { m.reconcile(key) })
	}
}

// AcquiredSubscription runs a subscription's worker here (see Claims).
func (m *Manager) AcquiredSubscription(key string) {
	m.mu.Lock()
	m.owned[key] = true
	m.mu.Unlock()
	m.goOwned(func() { m.reconcile(key) })
}

// ReleasedSubscription stops a subscription's worker here; it returns
// once the worker stopped, so its next owner never overlaps with it.
func (m *Manager) ReleasedSubscription(key string) {
	m.mu.Lock()
	delete(m.owned, key)
	m.mu.Unlock()
	m.ops.Lock()
	m.stopWorker(key)
	m.ops.Unlock()
	m.mu.Lock()
	ctx := m.runCtx
	m.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return // shutting down: the acknowledgement goes with the lease
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := m.opts.States.cli.Delete(ctx, m.ackPrefix()+key); err != nil {
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
	ctx := m.runCtx
	m.mu.Unlock()
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
	m.goOwned(func() {
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
	m.goOwned(func() {
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
		data, _ := json.Marshal(ack{Gen: mk.Gen})
		var opts []clientv3.OpOption
		if lease := m.opts.Lease(); lease != 0 {
			opts = append(opts, clientv3.WithLease(lease))
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := m.opts.States.cli.Put(actx, m.ackPrefix()+key, string(data), opts...); err != nil && ctx.Err() == nil {
			m.log.WithError(err).WithField("subscription", key).Warn("cannot acknowledge a subscription")
		}
	})
	return nil
}

// putMarker writes a new generation of a subscription's marker.
func (m *Manager) putMarker(ctx context.Context, key, reset string) (string, error) {
	gen := newID()
	data, _ := json.Marshal(marker{Gen: gen, Reset: reset})
	if _, err := m.opts.States.cli.Put(ctx, m.markerPrefix()+key, string(data)); err != nil {
		return "", errdefs.Unavailable(err, "cannot record the subscription for its owner")
	}
	return gen, nil
}

// deleteMarkers removes a subscription's marker, or every marker under a
// subject's prefix.
func (m *Manager) deleteMarkers(ctx context.Context, key string, prefix bool) error {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if _, err := m.opts.States.cli.Delete(ctx, m.markerPrefix()+key, opts...); err != nil {
		return errdefs.Unavailable(err, "cannot withdraw the subscription from its owner")
	}
	return nil
}

// waitAck returns once the subscription's owner acknowledged generation
// gen (its worker has its baseline), or a newer generation replaced it.
func (m *Manager) waitAck(ctx context.Context, key, gen string) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.AckWait)
	defer cancel()
	cli := m.opts.States.cli
	for {
		resp, err := cli.Txn(ctx).Then(clientv3.OpGet(m.markerPrefix()+key), clientv3.OpGet(m.ackPrefix()+key)).Commit()
		if err != nil {
			return errdefs.Unavailable(err, "cannot tell whether the subscription's worker started")
		}
		var mk marker
		var a ack
		mks, acks := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		if len(mks) > 0 {
			_ = json.Unmarshal(mks[0].Value, &mk)
		}
		if len(acks) > 0 {
			_ = json.Unmarshal(acks[0].Value, &a)
		}
		if a.Gen == gen || mk.Gen != gen {
			return nil
		}
		if !m.waitKeys(ctx, key, false, resp.Header.Revision) {
			return errdefs.Unavailable(ctx.Err(), "the subscription is stored, but no replica started its worker within %s", m.opts.AckWait)
		}
	}
}

// waitAcksGone returns once no owner acknowledges the subscription (or
// any under a prefix) any more: their workers stopped. A dead owner's
// acknowledgements go with its lease.
func (m *Manager) waitAcksGone(ctx context.Context, key string, prefix bool) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.AckWait)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithCountOnly()}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for {
		resp, err := m.opts.States.cli.Get(ctx, m.ackPrefix()+key, opts...)
		if err == nil && resp.Count == 0 {
			return
		}
		if err != nil || !m.waitKeys(ctx, key, prefix, resp.Header.Revision) {
			m.log.WithField("subscription", key).Warn("a subscription's worker was not seen to stop in time")
			return
		}
	}
}

// waitKeys waits for a change of a subscription's marker or
// acknowledgement after rev; false when ctx ended first.
func (m *Manager) waitKeys(ctx context.Context, key string, prefix bool, rev int64) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1)}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	cli := m.opts.States.cli
	a := cli.Watch(clientv3.WithRequireLeader(wctx), m.ackPrefix()+key, opts...)
	b := cli.Watch(clientv3.WithRequireLeader(wctx), m.markerPrefix()+key, opts...)
	select {
	case <-a:
	case <-b:
	case <-ctx.Done():
		return false
	}
	return true
}
