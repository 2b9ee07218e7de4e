package ownership

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/util/workqueue"
)

// Handler runs a kind's items. Acquired starts an item's work (it must not
// block for long); Released stops it and returns only once it stopped.
// Neither is called twice at once for one item; different items are
// handled concurrently.
type Handler interface {
	Acquired(item string)
	Released(item string)
}

// HandlerFuncs adapts two functions to a Handler; a nil one does nothing.
type HandlerFuncs struct {
	Acquire func(item string)
	Release func(item string)
}

// Acquired calls Acquire.
func (h HandlerFuncs) Acquired(item string) {
	if h.Acquire != nil {
		h.Acquire(item)
	}
}

// Released calls Release.
func (h HandlerFuncs) Released(item string) {
	if h.Release != nil {
		h.Release(item)
	}
}

var _ Handler = HandlerFuncs{}

// Kind is one kind of work: the items that exist (Want, Drop), which of
// them this replica holds, and who holds the others. Its workers follow
// the sample-controller shape: every change only enqueues an item's name;
// a worker decides what the item needs from the current state.
type Kind struct {
	s     *Set
	name  string
	h     []Handler // in the order attached; set before Run
	queue workqueue.TypedRateLimitingInterface[string]
	log   *logrus.Entry

	mu      sync.Mutex
	wanted  map[string]bool
	held    map[string]clientv3.LeaseID // acquired items and the lease of their claim
	holders map[string]string           // item → holder's id, as the claims watch has it
}

func newKind(s *Set, name string) *Kind {
	return &Kind{s: s, name: name, log: s.log.WithField("kind", name),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ownership-" + name}),
		wanted: map[string]bool{}, held: map[string]clientv3.LeaseID{}, holders: map[string]string{}}
}

// Handle attaches h to the kind: an item's Acquired calls every handler in
// the order attached, its Released in the reverse order. Parts that share
// a kind (a group's rsync actions, history and certificate requests)
// each attach their own; a part may be built with the kind it needs and
// attach itself afterwards. Handle panics once the Set runs, whose Run
// refuses a kind without a handler: handlers are part of the assembly.
func (k *Kind) Handle(h Handler) {
	if h == nil {
		panic("ownership: nil handler for kind " + k.name)
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	if k.s.running {
		panic("ownership: Handle after Run")
	}
	k.h = append(k.h, h)
}

// Want says item exists and needs an owner. It never blocks.
func (k *Kind) Want(item string) {
	k.mu.Lock()
	added := !k.wanted[item]
	k.wanted[item] = true
	k.mu.Unlock()
	if added {
		k.queue.Add(item)
	}
}

// Drop says item no longer exists: its holder releases it. It never blocks.
func (k *Kind) Drop(item string) {
	k.mu.Lock()
	removed := k.wanted[item]
	delete(k.wanted, item)
	k.mu.Unlock()
	if removed {
		k.queue.Add(item)
	}
}

// Owns reports whether this replica holds item (Acquired was called and
// Released was not).
func (k *Kind) Owns(item string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.held[item]
	return ok
}

// Owned lists the items this replica holds, sorted.
func (k *Kind) Owned() []string {
	k.mu.Lock()
	out := make([]string, 0, len(k.held))
	for item := range k.held {
		out = append(out, item)
	}
	k.mu.Unlock()
	sort.Strings(out)
	return out
}

// Holder is the id of the replica holding item's claim as this replica
// last saw it; "" when unclaimed.
func (k *Kind) Holder(item string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holders[item]
}

func (k *Kind) claimKey(item string) string { return k.s.ownersPrefix() + k.name + "/" + item }

// Guard is a transaction condition that holds only while this replica
// holds item's claim: work that writes under its ownership (a delivery
// state) puts it in its transaction, so a replica that lost the item
// without noticing yet (paused longer than the TTL) writes nothing.
func (k *Kind) Guard(item string) clientv3.Cmp {
	k.mu.Lock()
	lease, ok := k.held[item]
	k.mu.Unlock()
	if !ok {
		lease = -1 // no claim carries it
	}
	return clientv3.Compare(clientv3.LeaseValue(k.claimKey(item)), "=", int64(lease))
}

func (k *Kind) claimChanged(item, holder string, deleted bool) {
	k.mu.Lock()
	if deleted {
		delete(k.holders, item)
	} else {
		k.holders[item] = holder
	}
	_, held := k.held[item]
	want := k.wanted[item]
	k.mu.Unlock()
	if deleted && (want || held) {
		k.queue.Add(item) // free to claim; or ours was taken from us
	}
}

func (k *Kind) enqueueAll() {
	k.mu.Lock()
	items := make([]string, 0, len(k.wanted)+len(k.held))
	for item := range k.wanted {
		items = append(items, item)
	}
	for item := range k.held {
		if !k.wanted[item] {
			items = append(items, item)
		}
	}
	k.mu.Unlock()
	for _, item := range items {
		k.queue.Add(item)
	}
}

// run starts the kind's workers; they stop when its queue shuts down.
func (k *Kind) run(ctx context.Context, wg *sync.WaitGroup) {
	for range k.s.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k.next(ctx) {
			}
		}()
	}
}

func (k *Kind) next(ctx context.Context) bool {
	item, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(item)
	if err := k.sync(ctx, item); err != nil {
		if ctx.Err() == nil {
			k.log.WithError(err).WithField("item", item).Debug("cannot settle ownership; retrying")
			k.queue.AddRateLimited(item)
		}
		return true
	}
	k.queue.Forget(item)
	return true
}

// sync makes this replica hold item exactly when it is wanted and hashed
// here: it releases an item that moved (or whose lease is gone) and then
// deletes its claim, and claims an item that came here.
func (k *Kind) sync(ctx context.Context, item string) error {
	v := k.s.view()
	k.mu.Lock()
	want := k.wanted[item]
	lease, held := k.held[item]
	holder := k.holders[item]
	k.mu.Unlock()
	mine := want && k.s.mine(v, item)
	if held && (lease != v.lease || !mine || holder != k.s.opts.ID) {
		k.release(item)
		if lease == v.lease && v.lease != 0 {
			// Only this replica's own claim: one of its lease that is
			// gone was deleted with it.
			if err := k.deleteClaim(ctx, item, lease); err != nil {
				return err
			}
		}
		if mine {
			k.queue.Add(item) // ours again under the new lease: claim it anew
		}
		return nil
	}
	if !held && !mine && holder == k.s.opts.ID && v.lease != 0 {
		// Released, but deleting the claim failed (the retry lands here):
		// until it goes, no other replica can claim the item.
		return k.deleteClaim(ctx, item, v.lease)
	}
	if !mine || held {
		return nil
	}
	key := k.claimKey(item)
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := k.s.opts.Client.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, k.s.opts.ID, clientv3.WithLease(v.lease))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("claim %s/%s: %w", k.name, item, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != v.lease {
			// Another replica holds it and releases it when it sees the
			// new member set, or its lease expires: the claims watch
			// enqueues the item again when the claim goes.
			return nil
		}
	}
	k.mu.Lock()
	k.held[item] = v.lease
	k.holders[item] = k.s.opts.ID
	n := len(k.held)
	k.mu.Unlock()
	k.s.owned.WithLabelValues(k.name).Set(float64(n))
	k.s.moves.WithLabelValues(k.name, "acquired").Inc()
	k.log.WithField("item", item).Debug("acquired")
	for _, h := range k.h {
		h.Acquired(item)
	}
	return nil
}

// release stops an item's work and forgets it.
// deleteClaim deletes item's claim if it is still on lease.
func (k *Kind) deleteClaim(ctx context.Context, item string, lease clientv3.LeaseID) error {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if _, err := k.s.opts.Client.Txn(rctx).If(clientv3.Compare(clientv3.LeaseValue(k.claimKey(item)), "=", int64(lease))).
		Then(clientv3.OpDelete(k.claimKey(item))).Commit(); err != nil {
		return fmt.Errorf("release claim %s/%s: %w", k.name, item, err)
	}
	return nil
}

func (k *Kind) release(item string) {
	for _, h := range slices.Backward(k.h) {
		h.Released(item)
	}
	k.mu.Lock()
	delete(k.held, item)
	n := len(k.held)
	k.mu.Unlock()
	k.s.owned.WithLabelValues(k.name).Set(float64(n))
	k.s.moves.WithLabelValues(k.name, "released").Inc()
	k.log.WithField("item", item).Debug("released")
}

// releaseAll stops every held item's work; the caller then revokes the
// lease, which deletes the claims.
func (k *Kind) releaseAll() {
	for _, item := range k.Owned() {
		k.release(item)
	}
}
