package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
)

// A write to MongoDB and the index entry that follows it are two stores,
// so a writer stopped between them (killed, or its store failing) leaves
// the entry behind MongoDB. Each write therefore starts with a durable
// intent in etcd, next to the index:
//
//	<prefix>/catalog-intents/<id>   {"collection", "key", "by", "at", …}
//
// and the transaction that writes the entry removes it. An intent that
// stays is repaired by any replica (RunRepairs, which follows them): its
// object's entry is copied from MongoDB again, what the write left half
// made is undone — an object inserted with a write-ahead intent is
// removed unless it became visible, a content generation stored is
// dropped unless the object names it — and the intent goes. A replica
// repairs an intent once its writer is gone (its lease expired or it
// restarted), once the writer said it stopped (Ended: it failed, and the
// stores are to be repaired as soon as they can be), when it is this very
// process's and no write of it is in flight, or after intentLifetime.
// So the index follows MongoDB at every write, not only after a restart,
// and a write cut short by a MongoDB outage leaves nothing half made once
// MongoDB is back.

// intentLifetime bounds how long a live writer's intent waits before it
// is repaired anyway: well above the longest request.
const intentLifetime = 10 * time.Minute

// intentRecord is an intent as stored.
type intentRecord struct {
	Collection string    `json:"collection"`
	Key        Key       `json:"key"`
	By         string    `json:"by,omitempty"`
	At         time.Time `json:"at"`
	intentContent
	// Ended says the writer returned with an error: repair at once.
	Ended bool `json:"ended,omitempty"`
}

// intentContent is what a write leaves to undo should it stop: Pending,
// the write-ahead intent the object was inserted with, and ID, the _id of
// the document a create inserted; Gen, a content generation of Chunks
// chunks being stored.
type intentContent struct {
	Pending *time.Time `json:"pending,omitempty"`
	ID      string     `json:"id,omitempty"`
	Gen     *time.Time `json:"gen,omitempty"`
	Chunks  int        `json:"chunks,omitempty"`
}

// intent is one write's intent, as its writer holds it.
type intent struct {
	c       *Catalog
	cli     *clientv3.Client
	key     string // "" without an index: nothing is recorded
	rec     intentRecord
	rev     int64
	cleared bool // the entry's write removed it
	clean   bool // nothing to repair, whatever the write returns
}

func (x *index) intentsPrefix() string { return strings.TrimSuffix(x.prefix, "/") + "-intents/" }

// begin records the intent of a write to kind k's object key before its
// MongoDB write.
func (c *Catalog) begin(ctx context.Context, x *index, k *Kind, key Key, content intentContent) (*intent, error) {
	if err := c.available(); err != nil {
		return nil, err
	}
	in := &intent{c: c}
	if x == nil {
		return in, nil
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	in.cli, in.key = x.cli, x.intentsPrefix()+hex.EncodeToString(b[:])
	in.rec = intentRecord{Collection: k.Collection, Key: key, By: c.by(), At: time.Now().UTC(), intentContent: content}
	data, err := json.Marshal(in.rec)
	if err != nil {
		return nil, err
	}
	c.inflight.Store(in.key, true)
	resp, err := x.cli.Put(ctx, in.key, string(data))
	if err != nil {
		c.inflight.Delete(in.key)
		return nil, errdefs.Unavailable(err, "record the write of %s", k.describe(key))
	}
	in.rev = resp.Header.Revision
	return in, nil
}

// ops is the intent's removal, for the transaction that writes the entry.
func (in *intent) ops() []clientv3.Op {
	if in == nil || in.key == "" {
		return nil
	}
	return []clientv3.Op{clientv3.OpDelete(in.key)}
}

// untouched says the write changed nothing (it was refused before any
// MongoDB write took): its intent just goes.
func (in *intent) untouched() {
	if in != nil {
		in.clean = true
	}
}

// end finishes the write and returns its error, as callers are to see it
// (see storeError): its intent goes (if the entry's write did not take it
// already), or, when the write failed, is marked Ended so that it is
// repaired at once; when etcd cannot say so now, the repairer of this
// process finds it no longer in flight.
func (in *intent) end(err error) error {
	if in == nil {
		return err
	}
	err = in.c.storeError(err)
	if in.key == "" {
		return err
	}
	defer in.c.inflight.Delete(in.key)
	failed := err != nil && !in.clean
	if !failed && in.cleared {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !failed {
		_, _ = in.cli.Delete(ctx, in.key)
		return err
	}
	in.rec.Ended = true
	if data, merr := json.Marshal(in.rec); merr == nil {
		_, _ = in.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(in.key), "=", in.rev)).Then(clientv3.OpPut(in.key, string(data))).Commit()
	}
	return err
}

// storeError is a write's error as callers see it: one that MongoDB's
// absence caused (a network error, a timeout, no server to select, or
// MongoDB found down meanwhile) is unavailable, saying so, whatever
// operation met it; others are as they are.
func (c *Catalog) storeError(err error) error {
	var down storeDown
	switch {
	case err == nil || errors.As(err, &down):
		return err
	case mongo.IsNetworkError(err), mongo.IsTimeout(err): // no server to select is a timeout too
		return storeDown{errdefs.Unavailable(err, "MongoDB does not answer")}
	}
	if down := c.available(); down != nil {
		return errors.Join(down, err)
	}
	return err
}

// RepairOptions configures RunRepairs.
type RepairOptions struct {
	// Lifetime bounds how long a live writer's intent waits; 0 means 10
	// minutes.
	Lifetime time.Duration
	// Check is how long after its write (or its end, for a write that
	// failed) an intent is first looked at, and then how often while its
	// writer lives; 0 means 5s.
	Check  time.Duration
	Logger *logrus.Entry
}

// RunRepairs follows the intents of catalogue writes (see intent) and
// repairs those left behind, until ctx ends. Run it after UseIndex.
func (c *Catalog) RunRepairs(ctx context.Context, opts RepairOptions) error {
	x := c.index()
	if x == nil {
		return errors.New("catalog: RunRepairs needs the index (UseIndex)")
	}
	if opts.Lifetime == 0 {
		opts.Lifetime = intentLifetime
	}
	if opts.Check == 0 {
		opts.Check = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	c.mu.Lock()
	c.logger = opts.Logger
	c.mu.Unlock()
	r := &repairer{c: c, x: x, opts: opts, log: opts.Logger.WithField("component", "catalog-repair"),
		intents: map[string]*pendingIntent{}, wake: make(chan struct{}, 1)}
	f, err := etcdwatch.New(etcdwatch.Options{Client: x.cli, Prefixes: []string{x.intentsPrefix()}, Apply: r.apply,
		Name: "catalogue write intents", Logger: r.log})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.loop(ctx) }()
	f.Run(ctx)
	wg.Wait()
	return nil
}

// repairer holds the intents seen and when each is looked at next.
type repairer struct {
	c    *Catalog
	x    *index
	opts RepairOptions
	log  *logrus.Entry

	mu      sync.Mutex
	intents map[string]*pendingIntent
	wake    chan struct{}
}

type pendingIntent struct {
	rec     intentRecord
	rev     int64
	next    time.Time
	attempt int
}

func (r *repairer) apply(b etcdwatch.Batch) {
	r.mu.Lock()
	for _, ev := range b.Events {
		if ev.Deleted {
			delete(r.intents, ev.Key)
			continue
		}
		var rec intentRecord
		if json.Unmarshal(ev.Value, &rec) != nil {
			continue
		}
		next := rec.At.Add(r.opts.Check)
		if rec.Ended {
			// Not at once: a replica whose heartbeat has not missed yet
			// would send its undo to a MongoDB that holds the write's own
			// request and may carry it out after the undo.
			next = time.Now().Add(r.opts.Check)
		}
		r.intents[ev.Key] = &pendingIntent{rec: rec, rev: ev.ModRevision, next: next}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop looks at each intent when it is due, until ctx ends.
func (r *repairer) loop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		var due []string
		next := now.Add(time.Hour)
		r.mu.Lock()
		for key, p := range r.intents {
			if !p.next.After(now) {
				due = append(due, key)
			} else if p.next.Before(next) {
				next = p.next
			}
		}
		r.mu.Unlock()
		for _, key := range due {
			r.look(ctx, key)
		}
		if len(due) > 0 {
			continue
		}
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// look repairs an intent whose writer is gone, stopped or stuck, and
// otherwise looks again later.
func (r *repairer) look(ctx context.Context, key string) {
	r.mu.Lock()
	p := r.intents[key]
	r.mu.Unlock()
	if p == nil {
		return
	}
	if r.c.available() != nil {
		// Nothing to repair with; and what MongoDB holds of the write
		// lands once it answers, before this replica hears it does.
		r.mu.Lock()
		p.next = time.Now().Add(min(r.opts.Check, time.Second))
		r.mu.Unlock()
		return
	}
	_, inflight := r.c.inflight.Load(key)
	mine := p.rec.By != "" && p.rec.By == r.c.by()
	abandoned := p.rec.Ended || mine && !inflight || time.Since(p.rec.At) > r.opts.Lifetime ||
		!mine && r.c.staleMark(ctx, p.rec.At, p.rec.By)
	var err error
	if abandoned {
		if err = r.repair(ctx, key, p); err == nil {
			r.mu.Lock()
			if r.intents[key] == p {
				delete(r.intents, key)
			}
			r.mu.Unlock()
			return
		}
		r.log.WithError(err).WithField("object", p.rec.Collection+" "+strings.Join(p.rec.Key, "/")).Warn("cannot repair what a catalogue write left; retrying")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		p.attempt++
		p.next = time.Now().Add(backoff.Backoff{Base: time.Second, Max: 30 * time.Second}.Delay(p.attempt))
	} else {
		p.next = time.Now().Add(r.opts.Check)
	}
}

// repair undoes what the write left half made, copies its object's entry
// from MongoDB again and removes the intent (if nobody changed it since).
func (r *repairer) repair(ctx context.Context, key string, p *pendingIntent) error {
	k := r.c.kindOf(p.rec.Collection)
	if k == nil {
		_, err := r.x.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", p.rev)).Then(clientv3.OpDelete(key)).Commit()
		return err
	}
	if err := r.c.undo(ctx, k, p.rec.Key, p.rec.intentContent, p.rec.Ended); err != nil {
		return err
	}
	if err := r.c.refresh(ctx, r.x, k, p.rec.Key); err != nil {
		return err
	}
	// A delete stopped midway may have removed the children that go with
	// the object (Cascade) from MongoDB and not yet from the index.
	for _, child := range r.c.children[k] {
		if child.Cascade {
			if _, err := r.c.reconcileUnder(ctx, r.x, child, p.rec.Key); err != nil {
				return err
			}
		}
	}
	_, err := r.x.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", p.rev)).Then(clientv3.OpDelete(key)).Commit()
	if err == nil {
		r.log.WithFields(logrus.Fields{"object": k.describe(p.rec.Key), "by": p.rec.By, "ended": p.rec.Ended}).Info("repaired what a catalogue write left")
	}
	return err
}

// undo removes what a write stopped midway left in MongoDB: the object it
// inserted with a write-ahead intent, and a content generation the object
// does not name. A create that answered an error (ended) leaves nothing,
// visible or not: MongoDB may have carried it out after the answer. One
// whose writer died without an answer keeps what became visible: a
// replica may already have listed it (start-up indexes what MongoDB
// shows), and an object seen must not vanish later.
func (c *Catalog) undo(ctx context.Context, k *Kind, key Key, ic intentContent, ended bool) error {
	coll := c.db.Collection(k.Collection)
	if id, err := primitive.ObjectIDFromHex(ic.ID); err == nil {
		filter := bson.D{{Key: "_id", Value: id}}
		if !ended {
			filter = append(filter, bson.E{Key: fieldPending, Value: bson.D{{Key: "$exists", Value: true}}})
		}
		if _, err := coll.DeleteOne(ctx, filter); err != nil {
			return fmt.Errorf("undo the creation of %s: %w", k.describe(key), err)
		}
	}
	if ic.Pending != nil {
		if _, err := coll.DeleteOne(ctx, append(keyFilter(k, key), bson.E{Key: fieldPending, Value: *ic.Pending})); err != nil {
			return fmt.Errorf("undo the creation of %s: %w", k.describe(key), err)
		}
		if ic.Gen == nil {
			ic.Gen = ic.Pending
		}
	}
	if ic.Gen == nil {
		return nil
	}
	var s stored
	err := coll.FindOne(ctx, keyFilter(k, key), options.FindOne().SetProjection(contentProjection)).Decode(&s)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("undo a content write of %s: %w", k.describe(key), err)
	}
	if err == nil && s.Gen != nil && s.Gen.Equal(*ic.Gen) {
		return nil // the object names it: the write went through
	}
	return c.dropChunks(ctx, k, key, *ic.Gen, ic.Chunks)
}

// kindOf is the kind stored in collection, nil if none.
func (c *Catalog) kindOf(collection string) *Kind {
	for _, k := range append(c.kinds[:len(c.kinds):len(c.kinds)], lifecycles) {
		if k.Collection == collection {
			return k
		}
	}
	return nil
}

// log is the catalogue's logger (RunRepairs sets it).
func (c *Catalog) log() *logrus.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logger == nil {
		return logrus.NewEntry(logging.Discard())
	}
	return c.logger
}

// available is nil while MongoDB answers, as Options.Available says.
func (c *Catalog) available() error {
	c.mu.Lock()
	f := c.availableFn
	c.mu.Unlock()
	if f == nil {
		return nil
	}
	if err := f(); err != nil {
		return storeDown{err}
	}
	return nil
}

// storeDown is an error MongoDB's absence caused (unavailable, saying
// so); storeError leaves it as it is.
type storeDown struct{ error }

func (e storeDown) Unwrap() error { return e.error }

// guard is the context a write runs under (see Options.Guard), and what
// finishes its error: one the guard caused (MongoDB stopped answering
// mid-write, whatever step met it) is unavailable, saying so. While
// MongoDB is known down it returns that at once: the write starts
// nothing.
func (c *Catalog) guard(ctx context.Context) (context.Context, func(error) error, error) {
	if err := c.available(); err != nil {
		return ctx, nil, err
	}
	if c.guardFn == nil {
		return ctx, func(err error) error { return err }, nil
	}
	gctx, cancel := c.guardFn(ctx)
	return gctx, func(err error) error {
		defer cancel()
		var down storeDown
		if err == nil || errors.As(err, &down) || ctx.Err() != nil || gctx.Err() == nil {
			return err
		}
		return errors.Join(storeDown{context.Cause(gctx)}, err)
	}, nil
}
