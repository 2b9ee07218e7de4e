package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Records is one kind of owned record: any replica puts a record in etcd
// for a work item, the replica that owns the item follows the records
// with a watch, acts on them and acknowledges them on its lease, and the
// writer can wait for the acknowledgement, whichever replica it runs on.
// A record lives until its work is done, so the next owner of an item
// resumes it simply by reading the item's records (Acquired).
//
// Layout, both under the store's prefix (Options.Prefix, AckPrefix):
//
//	<prefix><item>/<name>   a record, with Layout Many (names hold no '/')
//	<prefix><item>          the item's one record, with Layout One
//	<ack prefix><key>       its owner's acknowledgement, on the owner's lease
//
// T is a record's value and A an acknowledgement's, both stored as JSON.
type Records[T, A any] struct {
	opts     RecordsOptions[T]
	log      *logrus.Entry
	follower *etcdwatch.Follower
	ready    chan struct{}
	once     sync.Once

	// mu orders deliveries: a record is handed to Owner once per revision,
	// and never an older one after a newer one.
	mu    sync.Mutex
	owned map[string]bool  // items this replica owns
	seen  map[string]int64 // record key → newest revision handed over
}

// Layout says how records map to items.
type Layout int

const (
	// Many records per item, at <item>/<name>; the item stays wanted
	// when they go (it may have other work).
	Many Layout = iota
	// One record per item, at <item>; the item is dropped when it goes.
	One
)

// Wanter is told which items exist: every item with a record needs an
// owner (ownership.Kind implements it).
type Wanter interface {
	Want(item string)
	Drop(item string)
}

// Owner acts on the records of the items this replica owns. Changed is
// told each record once per revision, in order: every record of an item
// when it is acquired, then every change while it is held (a record gone
// comes with Deleted). It must not block, nor call Acquired or Released.
type Owner[T any] interface {
	Changed(r Record[T])
}

// RecordsOptions configures Records; Client, Prefix, Claims and Owner are
// required.
type RecordsOptions[T any] struct {
	Client *clientv3.Client
	// Prefix holds the records and AckPrefix the acknowledgements (""
	// when nobody acknowledges them).
	Prefix, AckPrefix string
	Layout            Layout
	Claims            Wanter
	Owner             Owner[T]
	// Lease is the owner's lease, which acknowledgements are put on so
	// they vanish with it; nil or 0 puts them without one.
	Lease func() clientv3.LeaseID
	// Retry times the follower's listings after a failure (see etcdwatch).
	Retry  backoff.Backoff
	Name   string
	Logger *logrus.Entry
}

// Record is a record as read or followed. Key is below the prefix.
type Record[T any] struct {
	Key, Item string
	Value     T
	// Deleted marks a record gone (only to Owner.Changed).
	Deleted                     bool
	ModRevision, CreateRevision int64
}

// Ack is an acknowledgement as read.
type Ack[A any] struct {
	Value       A
	ModRevision int64
}

// State is what Read finds at one revision: the records, oldest change
// first, and the acknowledgements by record key (also of records that
// are gone).
type State[T, A any] struct {
	Records  []Record[T]
	Acks     map[string]Ack[A]
	Revision int64
}

// NewRecords returns Records; Run follows them.
func NewRecords[T, A any](opts RecordsOptions[T]) (*Records[T, A], error) {
	if opts.Client == nil || opts.Prefix == "" || opts.Claims == nil || opts.Owner == nil {
		return nil, errors.New("ownership: Client, Prefix, Claims and Owner are required")
	}
	if opts.Lease == nil {
		opts.Lease = func() clientv3.LeaseID { return 0 }
	}
	if opts.Name == "" {
		opts.Name = opts.Prefix
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	r := &Records[T, A]{opts: opts, log: opts.Logger.WithField("records", opts.Name), ready: make(chan struct{}),
		owned: map[string]bool{}, seen: map[string]int64{}}
	var err error
	r.follower, err = etcdwatch.New(etcdwatch.Options{Client: opts.Client, Prefixes: []string{opts.Prefix}, Apply: r.apply,
		Retry: opts.Retry, Name: opts.Name, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Ready is closed once every record was seen and its item wanted.
func (r *Records[T, A]) Ready() <-chan struct{} { return r.ready }

// Run follows the records until ctx ends: it wants every item that has a
// record and hands the records of owned items to Owner.
func (r *Records[T, A]) Run(ctx context.Context) error {
	r.follower.Run(ctx)
	return nil
}

// item is the item a record key belongs to.
func (r *Records[T, A]) item(key string) (string, bool) {
	if r.opts.Layout == One {
		return key, key != ""
	}
	i := strings.LastIndexByte(key, '/')
	if i <= 0 || i == len(key)-1 {
		return "", false
	}
	return key[:i], true
}

func (r *Records[T, A]) apply(b etcdwatch.Batch) {
	for _, ev := range b.Events {
		key := strings.TrimPrefix(ev.Key, r.opts.Prefix)
		item, ok := r.item(key)
		if !ok {
			continue
		}
		rec := Record[T]{Key: key, Item: item, Deleted: ev.Deleted, ModRevision: ev.ModRevision, CreateRevision: ev.CreateRevision}
		if ev.Deleted {
			if r.opts.Layout == One {
				r.opts.Claims.Drop(item) // its owner releases it
			}
		} else {
			r.opts.Claims.Want(item)
			if err := json.Unmarshal(ev.Value, &rec.Value); err != nil {
				r.log.WithField("key", ev.Key).Warn("skipping a malformed record")
				continue
			}
		}
		r.deliver(rec)
	}
	if b.First {
		r.once.Do(func() { close(r.ready) })
	}
}

// deliver hands a record of an owned item to Owner, once per revision.
func (r *Records[T, A]) deliver(rec Record[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.owned[rec.Item] || rec.ModRevision <= r.seen[rec.Key] {
		return
	}
	r.seen[rec.Key] = rec.ModRevision
	r.opts.Owner.Changed(rec)
}

// Acquired makes this replica the item's owner: its records are read and
// handed to Owner (retried for up to 30 s; what changes meanwhile comes
// through the watch anyway). Call it from the item's Handler.Acquired.
func (r *Records[T, A]) Acquired(item string) {
	r.mu.Lock()
	r.owned[item] = true
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	retry := backoff.Backoff{Base: 500 * time.Millisecond, Step: 500 * time.Millisecond}
	for {
		st, err := r.ReadItem(ctx, item)
		if err == nil {
			for _, rec := range st.Records {
				r.deliver(rec)
			}
			return
		}
		r.log.WithError(err).WithField("item", item).Warn("cannot read an item's records; retrying")
		if !retry.Wait(ctx) {
			r.log.WithField("item", item).Error("an item's records could not be read: they wait for its next owner")
			return
		}
	}
}

// Released gives the item up: nothing more of it is handed to Owner. Call
// it from the item's Handler.Released, before stopping the item's work.
func (r *Records[T, A]) Released(item string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.owned, item)
	for key := range r.seen {
		if it, _ := r.item(key); it == item {
			delete(r.seen, key)
		}
	}
}

// Put writes a record and returns its revision.
func (r *Records[T, A]) Put(ctx context.Context, key string, v T) (int64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	resp, err := r.opts.Client.Put(ctx, r.opts.Prefix+key, string(data))
	if err != nil {
		return 0, fmt.Errorf("put record %s: %w", key, err)
	}
	return resp.Header.Revision, nil
}

// Create writes a record unless one exists; it reports whether it did.
func (r *Records[T, A]) Create(ctx context.Context, key string, v T) (bool, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	k := r.opts.Prefix + key
	resp, err := r.opts.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(data))).Commit()
	if err != nil {
		return false, fmt.Errorf("create record %s: %w", key, err)
	}
	return resp.Succeeded, nil
}

// Replace puts each record's Value if none of them changed since it was
// read (its ModRevision); it reports whether they were, and the revision.
func (r *Records[T, A]) Replace(ctx context.Context, recs []Record[T]) (bool, int64, error) {
	cmps := make([]clientv3.Cmp, 0, len(recs))
	ops := make([]clientv3.Op, 0, len(recs))
	for _, rec := range recs {
		data, err := json.Marshal(rec.Value)
		if err != nil {
			return false, 0, err
		}
		k := r.opts.Prefix + rec.Key
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rec.ModRevision))
		ops = append(ops, clientv3.OpPut(k, string(data)))
	}
	resp, err := r.opts.Client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, 0, fmt.Errorf("replace records: %w", err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// Remove deletes a record and its acknowledgement if the record is still
// at modRev: a newer request is left alone.
func (r *Records[T, A]) Remove(ctx context.Context, key string, modRev int64) error {
	k := r.opts.Prefix + key
	ops := []clientv3.Op{clientv3.OpDelete(k)}
	if r.opts.AckPrefix != "" {
		ops = append(ops, clientv3.OpDelete(r.opts.AckPrefix+key))
	}
	if _, err := r.opts.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", modRev)).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("remove record %s: %w", key, err)
	}
	return nil
}

// Delete deletes a record, or every record under a key prefix.
func (r *Records[T, A]) Delete(ctx context.Context, key string, prefix bool) error {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if _, err := r.opts.Client.Delete(ctx, r.opts.Prefix+key, opts...); err != nil {
		return fmt.Errorf("delete record %s: %w", key, err)
	}
	return nil
}

// Keys lists the keys of every record.
func (r *Records[T, A]) Keys(ctx context.Context) (map[string]bool, error) {
	resp, err := r.opts.Client.Get(ctx, r.opts.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	out := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), r.opts.Prefix)] = true
	}
	return out, nil
}

// Ack puts the owner's acknowledgement of a record on its lease.
func (r *Records[T, A]) Ack(ctx context.Context, key string, v A) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var opts []clientv3.OpOption
	if lease := r.opts.Lease(); lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	if _, err := r.opts.Client.Put(ctx, r.opts.AckPrefix+key, string(data), opts...); err != nil {
		return fmt.Errorf("acknowledge record %s: %w", key, err)
	}
	return nil
}

// Unack withdraws the acknowledgement of a record.
func (r *Records[T, A]) Unack(ctx context.Context, key string) error {
	if _, err := r.opts.Client.Delete(ctx, r.opts.AckPrefix+key); err != nil {
		return fmt.Errorf("withdraw the acknowledgement of %s: %w", key, err)
	}
	return nil
}

// scope is what one read covers: a key, or a key prefix; with item set,
// only the records and acknowledgements of that item.
type scope struct {
	key    string
	prefix bool
	item   string
}

// itemScope covers one item's records.
func (r *Records[T, A]) itemScope(item string) scope {
	if r.opts.Layout == One {
		return scope{key: item}
	}
	return scope{key: item + "/", prefix: true, item: item}
}

// Read reads the records and acknowledgements at key (or under it, with
// prefix) at one revision.
func (r *Records[T, A]) Read(ctx context.Context, key string, prefix bool) (State[T, A], error) {
	return r.read(ctx, scope{key: key, prefix: prefix})
}

// ReadItem reads one item's records and acknowledgements.
func (r *Records[T, A]) ReadItem(ctx context.Context, item string) (State[T, A], error) {
	return r.read(ctx, r.itemScope(item))
}

func (r *Records[T, A]) read(ctx context.Context, sc scope) (State[T, A], error) {
	var opts []clientv3.OpOption
	if sc.prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	ops := []clientv3.Op{clientv3.OpGet(r.opts.Prefix+sc.key, opts...)}
	if r.opts.AckPrefix != "" {
		ops = append(ops, clientv3.OpGet(r.opts.AckPrefix+sc.key, opts...))
	}
	resp, err := r.opts.Client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return State[T, A]{}, fmt.Errorf("read records %s: %w", sc.key, err)
	}
	st := State[T, A]{Acks: map[string]Ack[A]{}, Revision: resp.Header.Revision}
	mine := func(key string) (string, bool) {
		item, ok := r.item(key)
		return item, ok && (sc.item == "" || item == sc.item) // not a longer item's
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		key := strings.TrimPrefix(string(kv.Key), r.opts.Prefix)
		item, ok := mine(key)
		if !ok {
			continue
		}
		rec := Record[T]{Key: key, Item: item, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision}
		if err := json.Unmarshal(kv.Value, &rec.Value); err != nil {
			r.log.WithField("key", string(kv.Key)).Warn("skipping a malformed record")
			continue
		}
		st.Records = append(st.Records, rec)
	}
	if len(resp.Responses) > 1 {
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			key := strings.TrimPrefix(string(kv.Key), r.opts.AckPrefix)
			var a Ack[A]
			if _, ok := mine(key); ok && json.Unmarshal(kv.Value, &a.Value) == nil {
				a.ModRevision = kv.ModRevision
				st.Acks[key] = a
			}
		}
	}
	sort.SliceStable(st.Records, func(i, j int) bool { return st.Records[i].ModRevision < st.Records[j].ModRevision })
	return st, nil
}

// Wait reads the records at key (or under it) until done says so, waking
// on every change of them or of their acknowledgements; it returns ctx's
// error if ctx ends first.
func (r *Records[T, A]) Wait(ctx context.Context, key string, prefix bool, done func(State[T, A]) bool) error {
	return r.wait(ctx, scope{key: key, prefix: prefix}, done)
}

// WaitItem is Wait over one item's records.
func (r *Records[T, A]) WaitItem(ctx context.Context, item string, done func(State[T, A]) bool) error {
	return r.wait(ctx, r.itemScope(item), done)
}

func (r *Records[T, A]) wait(ctx context.Context, sc scope, done func(State[T, A]) bool) error {
	keys := []string{r.opts.Prefix + sc.key}
	if r.opts.AckPrefix != "" {
		keys = append(keys, r.opts.AckPrefix+sc.key)
	}
	for {
		st, err := r.read(ctx, sc)
		if err != nil {
			return err
		}
		if done(st) {
			return nil
		}
		if err := etcdwatch.WaitChange(ctx, r.opts.Client, st.Revision, sc.prefix, keys...); err != nil {
			return err
		}
	}
}
