package catalog

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/argus-mc/argus/src/internal/errdefs"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// The index is a copy, in etcd, of every visible object's document (its
// key fields, metadata, spec, content generation and delete mark; never
// its uploaded file), one key per object, ordered as lists are:
//
//	<prefix>/catalog/<collection>/<key field> <key field> … <name>
//
// MongoDB stays the source of truth and keeps every guarantee it gave
// (unique keys, write-ahead intents, delete marks); the index serves what
// must stay fast however large the catalogue grows: Get, List (a page is
// one range read), and the parent checks of every create. FerretDB v1,
// the embedded store, answers every query but an equality on _id alone
// by reading the whole collection (its SQLite backend uses no index), so
// at 10,000 objects a lookup by key costs a few hundred milliseconds
// there; with MongoDB the index is merely faster.
//
// Writers update MongoDB first, then the entry, in a transaction that
// holds only if nobody changed the entry since they read it before their
// MongoDB write; when it does not hold (a concurrent writer of the same
// object), they copy the object from MongoDB again until it does, so the
// entry ends as MongoDB has it. Separating the key fields with a space
// (below every character a name may hold) makes etcd's key order the
// lists' order. Open reconciles the whole index with MongoDB at
// start-up, repairing what a process killed between the two writes left.
type index struct {
	cli    *clientv3.Client
	prefix string // "<prefix>/catalog/"
}

// indexSep separates key fields in an entry's key.
const indexSep = " "

// useIndex makes the catalogue keep and read its index in etcd under
// prefix (see index), after reconciling it with MongoDB. It runs after
// repair: what that repaired is then in the index too.
func (c *Catalog) useIndex(ctx context.Context, cli *clientv3.Client, prefix string) (Reconciled, error) {
	idx := newIndex(cli, prefix)
	c.mu.Lock()
	c.indexAt = idx
	c.mu.Unlock()
	return c.reconcileIndex(ctx, idx)
}

// reconcileIndex brings idx up to date with MongoDB, then reads through
// it.
func (c *Catalog) reconcileIndex(ctx context.Context, idx *index) (Reconciled, error) {
	var out Reconciled
	for _, k := range append(slices.Clone(c.kinds), lifecycles) {
		n, err := c.reconcile(ctx, idx, k)
		if err != nil {
			return out, err
		}
		out.Fixed += n
	}
	c.mu.Lock()
	c.idx = idx
	c.mu.Unlock()
	return out, nil
}

// Reindex reconciles the index Open put off (Options.DeferIndex) and
// reads through it from then on; once the catalogue reads its index (or
// has none) it does nothing.
func (c *Catalog) Reindex(ctx context.Context) (Reconciled, error) {
	c.mu.Lock()
	at, done := c.indexAt, c.idx != nil
	c.mu.Unlock()
	if done || at == nil {
		return Reconciled{}, nil
	}
	return c.reconcileIndex(ctx, at)
}

// Indexed reports whether the catalogue reads its index: false while the
// index Open put off waits for Reindex.
func (c *Catalog) Indexed() bool { return c.index() != nil }

// newIndex is the index kept under prefix (see etcdstore.Prefix).
func newIndex(cli *clientv3.Client, prefix string) *index {
	return &index{cli: cli, prefix: etcdstore.Prefix(prefix) + "/catalog/"}
}

// Reconciled counts the index entries useIndex repaired.
type Reconciled struct{ Fixed int }

func (c *Catalog) index() *index {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idx
}

func (x *index) key(k *Kind, key Key) string {
	return x.prefix + k.Collection + "/" + strings.Join(key, indexSep)
}

// children is the prefix of every entry of kind k under parent.
func (x *index) children(k *Kind, parent Key) string {
	if len(parent) == 0 {
		return x.prefix + k.Collection + "/"
	}
	return x.prefix + k.Collection + "/" + strings.Join(parent, indexSep) + indexSep
}

// entry is an object's document as the index keeps it: as stored, without
// its _id and write-ahead intent.
func entry(doc bson.Raw) ([]byte, error) {
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	out := d[:0]
	for _, e := range d {
		if e.Key != "_id" && e.Key != fieldPending && e.Key != fieldPendingBy {
			out = append(out, e)
		}
	}
	return bson.Marshal(out)
}

// withFields returns doc with the given fields set (appended if absent)
// and the unset ones removed.
func withFields(doc []byte, set bson.D, unset ...string) ([]byte, error) {
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	out := bson.D{}
	done := map[string]bool{}
	for _, e := range d {
		switch {
		case contains(unset, e.Key):
		case has(set, e.Key):
			out = append(out, bson.E{Key: e.Key, Value: value(set, e.Key)})
			done[e.Key] = true
		default:
			out = append(out, e)
		}
	}
	for _, e := range set {
		if !done[e.Key] {
			out = append(out, e)
		}
	}
	return bson.Marshal(out)
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

func has(d bson.D, k string) bool { return value(d, k) != nil }

func value(d bson.D, k string) any {
	for _, e := range d {
		if e.Key == k {
			return e.Value
		}
	}
	return nil
}

// read returns an object's entry (nil if none) and its mod revision (0 if
// none).
func (x *index) read(ctx context.Context, k *Kind, key Key) (bson.Raw, int64, error) {
	resp, err := x.cli.Get(ctx, x.key(k, key))
	if err != nil {
		return nil, 0, errdefs.Unavailable(err, "read the catalogue index")
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return bson.Raw(resp.Kvs[0].Value), resp.Kvs[0].ModRevision, nil
}

// write sets an object's entry (nil removes it) if it is still at mod
// revision rev (0: absent); otherwise another writer came between, and
// the entry is copied from MongoDB. The write's intent goes with it.
func (c *Catalog) write(ctx context.Context, x *index, k *Kind, key Key, rev int64, doc []byte, in *intent) error {
	ek := x.key(k, key)
	op := clientv3.OpDelete(ek)
	if doc != nil {
		op = clientv3.OpPut(ek, string(doc))
	}
	if done, err := x.commit(ctx, k, key, rev, op, in); done || err != nil {
		if done {
			c.noteUsage(ek, k, key, doc)
		}
		return err
	}
	return c.refresh(ctx, x, k, key, in)
}

// commit applies op to an object's entry, and removes the intent, if the
// entry is still at revision rev; false when it is not.
func (x *index) commit(ctx context.Context, k *Kind, key Key, rev int64, op clientv3.Op, in *intent) (bool, error) {
	resp, err := x.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(x.key(k, key)), "=", rev)).Then(append([]clientv3.Op{op}, in.ops()...)...).Commit()
	if err != nil {
		return false, errdefs.Unavailable(err, "%s is stored, but the catalogue index could not be updated (it is repaired as soon as etcd answers)", k.describe(key))
	}
	if resp.Succeeded && in != nil {
		in.cleared = true
	}
	return resp.Succeeded, nil
}

// refresh copies an object's entry from MongoDB (or removes it when the
// object is absent or still being created), retrying while others change
// the entry meanwhile; the intents given go with the entry's write.
func (c *Catalog) refresh(ctx context.Context, x *index, k *Kind, key Key, ins ...*intent) error {
	var in *intent
	if len(ins) > 0 {
		in = ins[0]
	}
	ek := x.key(k, key)
	for range 10 {
		_, rev, err := x.read(ctx, k, key)
		if err != nil {
			return err
		}
		raw, err := c.db.Collection(k.Collection).FindOne(ctx, append(keyFilter(k, key), notPending)).Raw()
		op := clientv3.OpDelete(ek)
		var doc []byte
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
		case err != nil:
			return fmt.Errorf("refresh the index entry of %s: %w", k.describe(key), err)
		default:
			if doc, err = entry(raw); err != nil {
				return err
			}
			op = clientv3.OpPut(ek, string(doc))
		}
		if done, err := x.commit(ctx, k, key, rev, op, in); done || err != nil {
			if done {
				c.noteUsage(ek, k, key, doc)
			}
			return err
		}
	}
	return errdefs.Unavailable(nil, "the catalogue index entry of %s keeps changing", k.describe(key))
}

// reconcile makes kind k's entries match MongoDB's visible documents. Each
// fix is guarded by the entry's revision as read before MongoDB was, so a
// concurrent writer (another replica starting) is never overwritten with
// an older copy.
func (c *Catalog) reconcile(ctx context.Context, x *index, k *Kind) (int, error) {
	return c.reconcileUnder(ctx, x, k, nil)
}

// reconcileUnder is reconcile for kind k's objects under parent (a prefix
// of their key; nil for all).
func (c *Catalog) reconcileUnder(ctx context.Context, x *index, k *Kind, parent Key) (int, error) {
	resp, err := x.cli.Get(ctx, x.children(k, parent), clientv3.WithPrefix())
	if err != nil {
		return 0, errdefs.Unavailable(err, "read the catalogue index")
	}
	type seen struct {
		rev int64
		doc bson.Raw
	}
	have := make(map[string]seen, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = seen{kv.ModRevision, kv.Value}
	}
	cur, err := c.db.Collection(k.Collection).Find(ctx, append(keyFilter(k, parent), notPending))
	if err != nil {
		return 0, fmt.Errorf("index %ss: %w", k.Name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var fixes []fix
	fields := k.KeyFields()
	for cur.Next(ctx) {
		key := make(Key, len(fields))
		for i, f := range fields {
			key[i], _ = cur.Current.Lookup(f).StringValueOK()
		}
		ek := x.key(k, key)
		doc, err := entry(cur.Current)
		if err != nil {
			return 0, err
		}
		old, ok := have[ek]
		delete(have, ek)
		if !ok || !sameDoc(old.doc, doc) {
			fixes = append(fixes, fix{cmp: clientv3.Compare(clientv3.ModRevision(ek), "=", old.rev), op: clientv3.OpPut(ek, string(doc))})
		}
	}
	if err := cur.Err(); err != nil {
		return 0, fmt.Errorf("index %ss: %w", k.Name, err)
	}
	for ek, old := range have { // entries of objects MongoDB does not have
		fixes = append(fixes, fix{cmp: clientv3.Compare(clientv3.ModRevision(ek), "=", old.rev), op: clientv3.OpDelete(ek)})
	}
	// In transactions of many fixes (a first start over a large catalogue
	// indexes everything); a batch a concurrent writer touched is retried
	// fix by fix, each guarded on its own.
	const batch = 60 // two operations each: under etcd's default --max-txn-ops of 128
	for i := 0; i < len(fixes); i += batch {
		part := fixes[i:min(i+batch, len(fixes))]
		cmps, ops := make([]clientv3.Cmp, len(part)), make([]clientv3.Op, len(part))
		for j, f := range part {
			cmps[j], ops[j] = f.cmp, f.op
		}
		resp, err := x.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return 0, errdefs.Unavailable(err, "repair the catalogue index")
		}
		if resp.Succeeded {
			continue
		}
		for _, f := range part {
			if _, err := x.cli.Txn(ctx).If(f.cmp).Then(f.op).Commit(); err != nil {
				return 0, errdefs.Unavailable(err, "repair the catalogue index")
			}
		}
	}
	return len(fixes), nil
}

// fix is one guarded repair of an index entry.
type fix struct {
	cmp clientv3.Cmp
	op  clientv3.Op
}

// sameDoc compares two documents whatever their fields' order.
func sameDoc(a, b bson.Raw) bool {
	var ma, mb bson.M
	if bson.Unmarshal(a, &ma) != nil || bson.Unmarshal(b, &mb) != nil {
		return false
	}
	return reflect.DeepEqual(ma, mb)
}

// Page is one page of a list: the objects and, when more follow, the
// token that continues after them.
type Page[S any] struct {
	Items    []Object[S]
	Continue string
}

// ListPage returns up to limit objects under parent (all of them for 0),
// sorted by name, starting after the object cont names (a Page's
// Continue; "" starts at the first). A missing parent is NotFound.
func (r *Resource[S]) ListPage(ctx context.Context, parent Key, cont string, limit int) (Page[S], error) {
	return r.ListPageBytes(ctx, parent, cont, limit, 0)
}

// EachPaged calls f with every object under parent, sorted by name, reading
// them a page of at most maxBytes of stored documents at a time (without
// the index, all at once), so a caller that streams them holds one page.
// A missing parent is NotFound; f's error ends it.
func (r *Resource[S]) EachPaged(ctx context.Context, parent Key, maxBytes int, f func(Object[S]) error) error {
	if r.cat.index() == nil {
		all, err := r.List(ctx, parent)
		if err != nil {
			return err
		}
		for _, o := range all {
			if err := f(o); err != nil {
				return err
			}
		}
		return nil
	}
	for cont := ""; ; {
		page, err := r.ListPageBytes(ctx, parent, cont, 0, maxBytes)
		if err != nil {
			return err
		}
		for _, o := range page.Items {
			if err := f(o); err != nil {
				return err
			}
		}
		if page.Continue == "" {
			return nil
		}
		cont = page.Continue
	}
}

// listBatch is how many objects a page reads from etcd at a time when it
// is bounded in bytes: what one read holds stays small whatever the page.
const listBatch = 64

// ListPageBytes is ListPage with the page also cut once its objects' stored
// documents pass maxBytes (0: no bound; the first object always comes):
// an answer of a thousand objects of the largest size would otherwise be
// read, decoded and encoded whole before any bound on answers applies.
func (r *Resource[S]) ListPageBytes(ctx context.Context, parent Key, cont string, limit, maxBytes int) (Page[S], error) {
	if len(parent) != len(r.kind.KeyFields())-len(r.kind.OwnFields()) {
		panic(fmt.Sprintf("catalog: parent key %v does not fit kind %s", parent, r.kind.Name))
	}
	x := r.cat.index()
	if x == nil {
		all, err := r.List(ctx, parent)
		if err != nil {
			return Page[S]{}, err
		}
		return pageOf(all, r.kind, cont, limit)
	}
	if err := r.parentExists(ctx, parent); err != nil {
		return Page[S]{}, err
	}
	prefix := x.children(r.kind, parent)
	from := prefix
	if cont != "" {
		own, err := base64.RawURLEncoding.DecodeString(cont)
		if err != nil || strings.Contains(string(own), "/") {
			return Page[S]{}, errdefs.Invalid("continue %q is not a token a list page gave", cont)
		}
		from = prefix + string(own) + "\x00" // just after it
	}
	page, size, last := Page[S]{}, 0, ""
	for {
		n := limit - len(page.Items)
		if maxBytes > 0 {
			n = min(n, listBatch)
			if limit <= 0 {
				n = listBatch
			}
		}
		opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
		if n > 0 {
			opts = append(opts, clientv3.WithLimit(int64(n)))
		}
		resp, err := x.cli.Get(ctx, from, opts...)
		if err != nil {
			return Page[S]{}, errdefs.Unavailable(err, "list %ss", r.kind.Name)
		}
		for i, kv := range resp.Kvs {
			if maxBytes > 0 && len(page.Items) > 0 && size+len(kv.Value) > maxBytes {
				page.Continue = base64.RawURLEncoding.EncodeToString([]byte(last))
				return page, nil
			}
			var obj Object[S]
			if err := bson.Unmarshal(kv.Value, &obj); err != nil {
				return Page[S]{}, fmt.Errorf("list %ss: %s: %w", r.kind.Name, kv.Key, err)
			}
			page.Items, size, last = append(page.Items, obj), size+len(kv.Value), strings.TrimPrefix(string(kv.Key), prefix)
			if limit > 0 && len(page.Items) == limit && (resp.More || i < len(resp.Kvs)-1) {
				page.Continue = base64.RawURLEncoding.EncodeToString([]byte(last))
				return page, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			if page.Items == nil {
				page.Items = []Object[S]{}
			}
			return page, nil
		}
		from = prefix + last + "\x00"
	}
}

// pageOf cuts a page from a whole list, for a catalogue without an index.
func pageOf[S any](all []Object[S], k *Kind, cont string, limit int) (Page[S], error) {
	own := func(o Object[S]) string {
		if len(k.OwnFields()) > 1 { // a composite app: its name and version
			if v, ok := any(o.Spec).(CompositeAppSpec); ok {
				return o.Metadata.Name + indexSep + v.Version
			}
		}
		return o.Metadata.Name
	}
	start := 0
	if cont != "" {
		after, err := base64.RawURLEncoding.DecodeString(cont)
		if err != nil {
			return Page[S]{}, errdefs.Invalid("continue %q is not a token a list page gave", cont)
		}
		for start < len(all) && own(all[start]) <= string(after) {
			start++
		}
	}
	end := len(all)
	if limit > 0 && start+limit < end {
		end = start + limit
	}
	p := Page[S]{Items: all[start:end]}
	if end < len(all) && end > start {
		p.Continue = base64.RawURLEncoding.EncodeToString([]byte(own(all[end-1])))
	}
	return p, nil
}

// Count counts the objects of the kind under parent (a prefix of the key:
// none counts them all), from the index when there is one.
func (r *Resource[S]) Count(ctx context.Context, parent Key) (int64, error) {
	if x := r.cat.index(); x != nil {
		resp, err := x.cli.Get(ctx, x.children(r.kind, parent), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, errdefs.Unavailable(err, "read the catalogue index")
		}
		return resp.Count, nil
	}
	n, err := r.coll.CountDocuments(ctx, r.visible(parent))
	if err != nil {
		return 0, fmt.Errorf("count %ss: %w", r.kind.Name, err)
	}
	return n, nil
}
