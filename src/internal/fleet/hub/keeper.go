package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
)

// keeper records the pull clusters this replica keeps (the owner among
// the replicas of each) Unreachable once they have had no stream for
// UnreachableAfter. It follows the session keys with one watch; a timer
// per kept cluster without a stream only marks it due, and one goroutine
// does the writes.
type keeper struct {
	mu      sync.Mutex
	present map[appcontext.ClusterRef]bool      // a session key exists
	since   map[appcontext.ClusterRef]time.Time // when the cluster lost its stream (or this replica learnt it had none)
	kept    map[appcontext.ClusterRef]*time.Timer
	due     map[appcontext.ClusterRef]bool
	wake    chan struct{}
}

// poke wakes the keeper's writer, if it is not awake already.
func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keeper) init() {
	k.present, k.since = map[appcontext.ClusterRef]bool{}, map[appcontext.ClusterRef]time.Time{}
	k.kept, k.due = map[appcontext.ClusterRef]*time.Timer{}, map[appcontext.ClusterRef]bool{}
	k.wake = make(chan struct{}, 1)
}

// want declares a pull cluster: with Claims, one replica is handed it;
// alone, this one keeps it.
func (h *Hub) want(ref appcontext.ClusterRef) {
	if h.opts.Claims != nil {
		h.opts.Claims.Want(ref.String())
		return
	}
	h.Acquired(ref.String())
}

func (h *Hub) drop(ref appcontext.ClusterRef) {
	if h.opts.Claims != nil {
		h.opts.Claims.Drop(ref.String())
		return
	}
	h.Released(ref.String())
}

// Acquired hands this replica a pull cluster to keep (ownership.Handler).
func (h *Hub) Acquired(item string) {
	ref, err := appcontext.ParseClusterRef(item)
	if err != nil {
		return
	}
	k := &h.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.kept[ref]; ok {
		return
	}
	k.kept[ref] = nil
	if !k.present[ref] {
		h.startTimerLocked(ref)
	}
}

// Released takes a pull cluster back (ownership.Handler).
func (h *Hub) Released(item string) {
	ref, err := appcontext.ParseClusterRef(item)
	if err != nil {
		return
	}
	k := &h.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	if t := k.kept[ref]; t != nil {
		t.Stop()
	}
	delete(k.kept, ref)
	delete(k.due, ref)
}

// startTimerLocked counts the time ref has been without a stream.
func (h *Hub) startTimerLocked(ref appcontext.ClusterRef) {
	k := &h.keeper
	if _, ok := k.since[ref]; !ok {
		k.since[ref] = h.opts.Now()
	}
	if t := k.kept[ref]; t != nil {
		t.Stop()
	}
	wait := h.opts.UnreachableAfter - h.opts.Now().Sub(k.since[ref])
	k.kept[ref] = time.AfterFunc(max(0, wait), func() {
		k.mu.Lock()
		if _, kept := k.kept[ref]; kept && !k.present[ref] {
			k.due[ref] = true
		}
		k.mu.Unlock()
		k.poke()
	})
}

// sessionEvent follows one session key (a key gone while the watch was
// broken comes as a deletion too).
func (h *Hub) sessionEvent(ev etcdwatch.Event) {
	ref, err := appcontext.ParseClusterRef(strings.TrimPrefix(ev.Key, h.keys.sessionsPrefix()))
	if err != nil {
		return
	}
	k := &h.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	if ev.Deleted {
		h.absentLocked(ref)
	} else {
		h.presentLocked(ref)
	}
}

func (h *Hub) presentLocked(ref appcontext.ClusterRef) {
	k := &h.keeper
	k.present[ref] = true
	delete(k.since, ref)
	delete(k.due, ref)
	if t, kept := k.kept[ref]; kept && t != nil {
		t.Stop()
		k.kept[ref] = nil
	}
}

func (h *Hub) absentLocked(ref appcontext.ClusterRef) {
	k := &h.keeper
	if !k.present[ref] {
		return
	}
	delete(k.present, ref)
	k.since[ref] = h.opts.Now()
	if _, kept := k.kept[ref]; kept {
		h.startTimerLocked(ref)
	}
}

// keep writes the states of clusters due until ctx ends.
func (h *Hub) keep(ctx context.Context) {
	k := &h.keeper
	defer func() {
		k.mu.Lock()
		for _, t := range k.kept {
			if t != nil {
				t.Stop()
			}
		}
		k.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		}
		k.mu.Lock()
		due := make(map[appcontext.ClusterRef]time.Time, len(k.due))
		for ref := range k.due {
			due[ref] = k.since[ref]
		}
		k.due = map[appcontext.ClusterRef]bool{}
		k.mu.Unlock()
		for ref, since := range due {
			if err := h.markUnreachable(ctx, ref, since); err != nil && ctx.Err() == nil {
				h.log.WithError(err).WithField("cluster", ref.String()).Warn("cannot record a pull cluster unreachable; retrying")
				k.mu.Lock()
				if _, kept := k.kept[ref]; kept && !k.present[ref] {
					k.kept[ref] = time.AfterFunc(time.Second, func() {
						k.mu.Lock()
						k.due[ref] = true
						k.mu.Unlock()
						k.poke()
					})
				}
				k.mu.Unlock()
			}
		}
	}
}

// markUnreachable records ref Unreachable since the given time, provided
// the cluster is still registered, no stream started meanwhile (the
// guard) and nobody wrote its state since it was read (else it reads
// again).
func (h *Hub) markUnreachable(ctx context.Context, ref appcontext.ClusterRef, since time.Time) error {
	stateKey, sessionKey, recordKey := h.opts.Contexts.ClusterStateKey(ref), h.keys.session(ref), h.opts.Credentials.RecordKey(ref)
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := h.opts.Client.Txn(ctx).Then(clientv3.OpGet(stateKey), clientv3.OpGet(sessionKey, clientv3.WithCountOnly()),
			clientv3.OpGet(recordKey, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return fmt.Errorf("read the state of %s: %w", ref, err)
		}
		if resp.Responses[1].GetResponseRange().GetCount() > 0 || resp.Responses[2].GetResponseRange().GetCount() == 0 {
			return nil // a stream started, or the cluster is gone
		}
		var st appcontext.ClusterState
		var rev int64
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			rev = kvs[0].ModRevision
			_ = json.Unmarshal(kvs[0].Value, &st)
		}
		if st.Connectivity == appcontext.Unreachable {
			return nil
		}
		st.Connectivity, st.UnreachableSince, st.Updated, st.Agent = appcontext.Unreachable, since.UTC(), h.opts.Now().UTC(), true
		if st.Monitor == "" {
			st.Monitor, st.Reason = appcontext.MonitorNotInstalled, "no agent has connected yet"
		}
		data, err := json.Marshal(st)
		if err != nil {
			return err
		}
		txn, err := h.opts.Client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(recordKey), ">", 0),
			clientv3.Compare(clientv3.CreateRevision(sessionKey), "=", 0),
			clientv3.Compare(clientv3.ModRevision(stateKey), "=", rev),
		).Then(clientv3.OpPut(stateKey, string(data))).Commit()
		if err != nil {
			return fmt.Errorf("record %s unreachable: %w", ref, err)
		}
		if txn.Succeeded {
			h.log.WithField("cluster", ref.String()).WithField("since", since.UTC().Format(time.RFC3339)).Warn("pull cluster unreachable: its agent has no stream")
			return nil
		}
	}
	return errors.New("the cluster's state kept changing")
}
