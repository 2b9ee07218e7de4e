package etcdwatch

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Event is one key's change: a put, or a delete (Deleted, Value nil).
type Event struct {
	Key     string
	Value   []byte
	Deleted bool
	// ModRevision is the change's revision; for a delete found by a
	// listing (the key went while the watch was broken) it is the
	// listing's revision, the exact one being unknown.
	ModRevision    int64
	CreateRevision int64
	// Lease is the key's lease, 0 for none and for a delete.
	Lease int64
}

// Batch is what the consumer applies at once: a watch response's events,
// or what a listing found different from what the consumer had.
type Batch struct {
	Events []Event
	// Revision is how far the consumer is once it applied the batch: every
	// change under the prefixes up to it was handed over. A progress
	// notification comes as a batch without events that moves it on.
	Revision int64
	// Listed marks a listing's batch: the first one (every key, as puts),
	// or one after the watch broke (only what changed meanwhile, or every
	// key as a Reset).
	Listed bool
	// First marks the first listing's batch.
	First bool
	// Reset marks a listing after a gap that the consumer replaces
	// everything it has with (Options.HashKeys): every key, as puts; a key
	// it has that is not in it is gone.
	Reset bool
}

// Options configures a Follower; Client, Prefixes and Apply are required.
type Options struct {
	Client *clientv3.Client
	// Prefixes are followed together: listed at one revision and watched
	// from it.
	Prefixes []string
	// Apply is called on Run's goroutine with every batch, in order.
	Apply func(Batch)
	// Retry times the listings after a failure (a compaction is listed
	// again at once); the zero value means 1 s more each time, up to 10 s.
	Retry backoff.Backoff
	// Name says in logs what is followed.
	Name   string
	Logger *logrus.Entry
	// HashKeys has the follower remember a 64-bit hash of each key it
	// handed over instead of the key: a follower of a whole fleet's keys
	// (the context cache: a dozen keys of about 100 bytes a cluster, on
	// every replica) then holds 16 bytes a key instead of the key's
	// string. It cannot name a key that went while the watch was broken,
	// so a listing after a gap that lacks one it had comes whole, as a
	// Reset batch; the consumer must take those. (Two keys of one hash —
	// for a million keys, about one chance in 40 million — would hide the
	// deletion of one while the other lives.)
	HashKeys bool
}

// Follower lists and watches its prefixes. It remembers the mod revision
// of every key it handed over, which is how a listing after a gap finds
// what changed; Run may be called again after it returned (never twice at
// once) and carries on from what the consumer has.
type Follower struct {
	opts   Options
	log    *logrus.Entry
	known  map[string]int64 // key → mod revision handed over
	hashed map[uint64]int64 // the same by the key's hash, with HashKeys
	seed   maphash.Seed
	first  bool // no listing was handed over yet
}

// New returns a Follower; Run follows.
func New(opts Options) (*Follower, error) {
	if opts.Client == nil || len(opts.Prefixes) == 0 || opts.Apply == nil {
		return nil, errors.New("etcdwatch: Client, Prefixes and Apply are required")
	}
	if opts.Retry == (backoff.Backoff{}) {
		opts.Retry = backoff.Backoff{Base: time.Second, Step: time.Second, Max: 10 * time.Second}
	}
	if opts.Name == "" {
		opts.Name = strings.Join(opts.Prefixes, ", ")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	f := &Follower{opts: opts, log: opts.Logger.WithField("watch", opts.Name), first: true, seed: maphash.MakeSeed()}
	if opts.HashKeys {
		f.hashed = map[uint64]int64{}
	} else {
		f.known = map[string]int64{}
	}
	return f, nil
}

func (f *Follower) hash(key string) uint64 { return maphash.String(f.seed, key) }

// handed returns the mod revision of key as handed over, if it was.
func (f *Follower) handed(key string) (int64, bool) {
	if f.hashed != nil {
		mod, ok := f.hashed[f.hash(key)]
		return mod, ok
	}
	mod, ok := f.known[key]
	return mod, ok
}

// remember records key as handed over at mod; 0 forgets it.
func (f *Follower) remember(key string, mod int64) {
	switch {
	case f.hashed != nil && mod == 0:
		delete(f.hashed, f.hash(key))
	case f.hashed != nil:
		f.hashed[f.hash(key)] = mod
	case mod == 0:
		delete(f.known, key)
	default:
		f.known[key] = mod
	}
}

// Run lists and follows until ctx ends, listing again whenever the watch
// breaks; failures are logged and retried, never returned.
func (f *Follower) Run(ctx context.Context) {
	retry := f.opts.Retry
	for ctx.Err() == nil {
		rev, err := f.list(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.log.WithError(err).Warn("cannot list; retrying")
				retry.Wait(ctx)
			}
			continue
		}
		err = f.watch(ctx, rev, &retry)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, rpctypes.ErrCompacted):
			f.log.Info("the watch fell behind a compaction; listing again")
		default:
			f.log.WithError(err).Warn("watch ended; listing again")
			retry.Wait(ctx)
		}
	}
}

// list reads the prefixes at one revision and hands over the differences.
func (f *Follower) list(ctx context.Context) (int64, error) {
	ops := make([]clientv3.Op, len(f.opts.Prefixes))
	for i, p := range f.opts.Prefixes {
		ops[i] = clientv3.OpGet(p, clientv3.WithPrefix())
	}
	resp, err := f.opts.Client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", f.opts.Name, err)
	}
	rev := resp.Header.Revision
	b := Batch{Revision: rev, Listed: true, First: f.first}
	seen := map[string]bool{}
	var listed []*mvccpb.KeyValue
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if key := string(kv.Key); !seen[key] { // prefixes may overlap
				seen[key] = true
				listed = append(listed, kv)
			}
		}
	}
	if f.hashed != nil && !f.first && f.wentUnnamed(listed) {
		f.hashed = make(map[uint64]int64, len(listed))
		for _, kv := range listed {
			key := string(kv.Key)
			f.remember(key, kv.ModRevision)
			b.Events = append(b.Events, eventOf(key, kv, false))
		}
		b.Reset = true
		f.opts.Apply(b)
		return rev, nil
	}
	for _, kv := range listed {
		key := string(kv.Key)
		if mod, ok := f.handed(key); ok && mod == kv.ModRevision {
			continue // the consumer has it
		}
		f.remember(key, kv.ModRevision)
		b.Events = append(b.Events, eventOf(key, kv, false))
	}
	if f.hashed == nil {
		var gone []string
		for key := range f.known {
			if !seen[key] {
				gone = append(gone, key)
			}
		}
		sort.Strings(gone)
		for _, key := range gone {
			delete(f.known, key)
			b.Events = append(b.Events, Event{Key: key, Deleted: true, ModRevision: rev})
		}
	}
	f.first = false
	f.opts.Apply(b)
	return rev, nil
}

// wentUnnamed reports whether a key handed over is not among those
// listed — a hash remembered that no listed key has —, which a follower
// that remembers hashes cannot name. (Only a deleted key sharing its hash
// with a live one hides.)
func (f *Follower) wentUnnamed(listed []*mvccpb.KeyValue) bool {
	hashes := make(map[uint64]struct{}, len(listed))
	for _, kv := range listed {
		hashes[f.hash(string(kv.Key))] = struct{}{}
	}
	for h := range f.hashed {
		if _, ok := hashes[h]; !ok {
			return true
		}
	}
	return false
}

// eventOf is kv's event under key, the string the Follower made for it
// (and keeps, for a key new to it): a consumer keeping a new key shares it
// instead of a copy of its own (110,000 keys of a context on a fleet).
func eventOf(key string, kv *mvccpb.KeyValue, deleted bool) Event {
	ev := Event{Key: key, Deleted: deleted, ModRevision: kv.ModRevision}
	if !deleted {
		ev.Value, ev.CreateRevision, ev.Lease = kv.Value, kv.CreateRevision, kv.Lease
	}
	return ev
}

// response is one prefix's watch response.
type response struct {
	i    int
	resp clientv3.WatchResponse
	ok   bool
}

// watch follows the prefixes from rev+1 until the watch breaks; retry is
// reset once it answers.
func (f *Follower) watch(ctx context.Context, rev int64, retry *backoff.Backoff) error {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	in := make(chan response)
	for i, p := range f.opts.Prefixes {
		// Every loop watches on the stream of the contexts that require a
		// leader: a progress request (read-your-writes) goes to it.
		w := f.opts.Client.Watch(clientv3.WithRequireLeader(wctx), p, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, ok := <-w
				select {
				case in <- response{i: i, resp: r, ok: ok}:
				case <-wctx.Done():
					return
				}
				if !ok {
					return
				}
			}
		}()
	}
	// Each prefix's stream is as far as its last response; the consumer
	// is as far as the slowest.
	revs := make([]int64, len(f.opts.Prefixes))
	for i := range revs {
		revs[i] = rev
	}
	for {
		var r response
		select {
		case r = <-in:
		case <-ctx.Done():
			return nil
		}
		if err := watchErr(r); err != nil {
			return err
		}
		retry.Reset()
		b := Batch{}
		if r.resp.IsProgressNotify() {
			revs[r.i] = max(revs[r.i], r.resp.Header.Revision)
		}
		for _, ev := range r.resp.Events {
			key := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				f.remember(key, 0)
			} else {
				f.remember(key, ev.Kv.ModRevision)
			}
			b.Events = append(b.Events, eventOf(key, ev.Kv, ev.Type == mvccpb.DELETE))
			revs[r.i] = max(revs[r.i], ev.Kv.ModRevision)
		}
		b.Revision = revs[0]
		for _, v := range revs[1:] {
			b.Revision = min(b.Revision, v)
		}
		f.opts.Apply(b)
	}
}

// watchErr is why a watch response ends the watch, or nil.
func watchErr(r response) error {
	switch {
	case !r.ok:
		return errors.New("watch closed")
	case r.resp.CompactRevision != 0:
		return rpctypes.ErrCompacted
	case r.resp.Err() != nil:
		return r.resp.Err()
	case r.resp.Canceled:
		return errors.New("watch cancelled")
	}
	return nil
}

// WaitChange returns once anything changed under the prefixes (with
// prefix; else the keys) after rev, or the watch broke: either way the
// caller reads again. It returns ctx's error if ctx ends first. Progress
// notifications are no change.
func WaitChange(ctx context.Context, cli *clientv3.Client, rev int64, prefix bool, keys ...string) error {
	wctx, cancel := context.WithCancel(ctx)
	opts := []clientv3.OpOption{clientv3.WithRev(rev + 1)}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	// One watch per key, fanned in; each goroutine ends with wctx.
	changed := make(chan struct{}, len(keys))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, key := range keys {
		w := cli.Watch(clientv3.WithRequireLeader(wctx), key, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range w {
				if !r.IsProgressNotify() {
					changed <- struct{}{}
					return
				}
			}
			changed <- struct{}{} // closed: the watch broke, or wctx ended
		}()
	}
	select {
	case <-changed:
	case <-ctx.Done():
	}
	return ctx.Err()
}
