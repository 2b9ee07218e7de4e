package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Catalog is the set of kinds stored in one MongoDB database.
type Catalog struct {
	db       *mongo.Database
	kinds    []*Kind
	children map[*Kind][]*Kind

	// staleBefore is the last repair's point: intents and delete marks
	// older than it belong to no live process (see takeOver).
	mu          sync.Mutex
	staleBefore time.Time
	// indexAt is the index the catalogue keeps (nil: none); idx, once it
	// is reconciled, serves reads; nil reads MongoDB alone.
	indexAt, idx *index
	// owner signs this process's markers (see Owner); nil judges them by
	// staleBefore alone.
	owner *Owner
	// logger is RunRepairs'; inflight are this process's write intents
	// still at work (see intent).
	logger   *logrus.Entry
	inflight sync.Map
	// availableFn says whether MongoDB answers (UseAvailability);
	// guardFn cuts a write short when it stops answering (Options.Guard).
	availableFn func() error
	guardFn     func(context.Context) (context.Context, context.CancelFunc)
	// limits bound callers' writes (see Limits); usage, kept by
	// TrackUsage, is what they are checked against.
	limits Limits
	usage  usage
}

// Options configures Open; DB is required.
type Options struct {
	DB *mongo.Database
	// Kinds are the kinds stored; nil means AllKinds(). Every kind's
	// parent must be among them.
	Kinds []*Kind
	// Owner signs this process's markers and tells whether another
	// process's are live (see Owner); nil judges them by their age alone.
	Owner *Owner
	// RepairBefore, when set, repairs what writers killed before it left
	// half done (see repair) before anyone reads; the zero time repairs
	// nothing.
	RepairBefore time.Time
	// Index, when set, makes the catalogue keep and read an index in etcd
	// under IndexPrefix (see index), brought up to date with MongoDB
	// after the repair; nil reads MongoDB alone.
	Index       *clientv3.Client
	IndexPrefix string
	// Available, when set, says whether MongoDB answers (store/mongo's
	// Available): while it does not, writes fail at once with its error
	// (unavailable, so 503) and start nothing they would leave half made.
	Available func() error
	// Guard, when set, gives each write a context that ends as soon as
	// MongoDB is found not answering (store/mongo's Guard): a write in
	// flight then fails (unavailable) at once rather than at the driver's
	// timeout, and its intent undoes what it did (see intent).
	Guard func(context.Context) (context.Context, context.CancelFunc)
	// DeferIndex, when it says an error bringing the index up to date is
	// passing (etcd out of space takes no writes), makes Open return the
	// catalogue reading MongoDB meanwhile, with Opened.IndexDeferred;
	// Reindex tries again. Nil fails Open.
	DeferIndex func(error) bool
	// Limits bound what callers may store (see Limits); project and total
	// limits apply once TrackUsage follows the index.
	Limits Limits
}

// Opened is what Open found to repair.
type Opened struct {
	Recovered Recovered
	// IndexFixed counts the index entries brought up to date.
	IndexFixed int
	// IndexDeferred is why the index was not brought up to date (see
	// Options.DeferIndex); nil when it was, or there is none.
	IndexDeferred error
}

// Open returns the catalogue ready to use: its collections prepared
// (unique key indexes), its markers signed by Owner, what killed writers
// left repaired, its limits set and its index reconciled, in that order.
func Open(ctx context.Context, opts Options) (*Catalog, Opened, error) {
	var out Opened
	if opts.DB == nil {
		return nil, out, errors.New("catalog: DB is required")
	}
	if opts.Kinds == nil {
		opts.Kinds = AllKinds()
	}
	c, err := prepare(ctx, opts.DB, opts.Kinds...)
	if err != nil {
		return nil, out, err
	}
	if opts.Owner != nil {
		c.setOwner(*opts.Owner)
	}
	c.availableFn, c.guardFn = opts.Available, opts.Guard
	if !opts.RepairBefore.IsZero() {
		if out.Recovered, err = c.repair(ctx, opts.RepairBefore); err != nil {
			return nil, out, fmt.Errorf("catalog: repair: %w", err)
		}
	}
	c.setLimits(opts.Limits)
	if opts.Index != nil {
		fixed, err := c.useIndex(ctx, opts.Index, opts.IndexPrefix)
		switch {
		case err == nil:
			out.IndexFixed = fixed.Fixed
		case opts.DeferIndex != nil && opts.DeferIndex(err):
			out.IndexDeferred = err
		default:
			return nil, out, fmt.Errorf("catalog: index: %w", err)
		}
	}
	return c, out, nil
}

// prepare creates the collections' unique key indexes of the given kinds
// and returns the catalogue on MongoDB alone.
func prepare(ctx context.Context, db *mongo.Database, kinds ...*Kind) (*Catalog, error) {
	c := &Catalog{db: db, kinds: kinds, children: map[*Kind][]*Kind{}}
	known := map[*Kind]bool{}
	for _, k := range kinds {
		known[k] = true
	}
	for _, k := range kinds {
		if k.Parent != nil {
			if !known[k.Parent] {
				return nil, fmt.Errorf("catalog: kind %s has unregistered parent %s", k.Name, k.Parent.Name)
			}
			c.children[k.Parent] = append(c.children[k.Parent], k)
		}
		keys := bson.D{}
		for _, f := range k.KeyFields() {
			keys = append(keys, bson.E{Key: f, Value: 1})
		}
		_, err := db.Collection(k.Collection).Indexes().CreateOne(ctx, mongo.IndexModel{
			Keys:    keys,
			Options: options.Index().SetUnique(true).SetName("key"),
		})
		if err != nil {
			return nil, fmt.Errorf("catalog: index %s: %w", k.Collection, err)
		}
		if err := c.ensureIndexes(ctx, k); err != nil {
			return nil, fmt.Errorf("catalog: index %s: %w", k.Collection, err)
		}
		if k == DeploymentIntentGroups {
			if err := c.ensureDIGStateIndex(ctx); err != nil {
				return nil, fmt.Errorf("catalog: index digstate: %w", err)
			}
		}
	}
	return c, nil
}

// has reports whether the catalogue holds kind.
func (c *Catalog) has(kind *Kind) bool { return slices.Contains(c.kinds, kind) }

// Resource gives typed access to the objects of one kind.
type Resource[S any] struct {
	cat  *Catalog
	kind *Kind
	coll *mongo.Collection
}

// For returns typed access to kind's objects, whose spec type is S.
func For[S any](c *Catalog, kind *Kind) *Resource[S] {
	return &Resource[S]{cat: c, kind: kind, coll: c.db.Collection(kind.Collection)}
}

// Kind returns the resource's kind.
func (r *Resource[S]) Kind() *Kind { return r.kind }

func (r *Resource[S]) filter(key Key) bson.D { return keyFilter(r.kind, key) }

// Two markers keep readers and writers apart without transactions (FerretDB
// has none):
//
//   - pendingSince is a write-ahead intent: an object created with its
//     content is inserted with it, and it is cleared once the content is
//     stored. Readers treat a pending object as absent, so no reader sees an
//     object without its content, and the start-up repair removes the intents a killed
//     process left behind.
//   - deletingSince is a tombstone set first by Delete. Creates of children
//     check it before and after they insert, so a child is either seen by
//     the delete's check (409) or removes itself.
const (
	fieldPending  = "pendingSince"
	fieldDeleting = "deletingSince"
)

// notPending matches objects that are not still being created.
var notPending = bson.E{Key: fieldPending, Value: bson.D{{Key: "$exists", Value: false}}}

// notDeleting matches objects that no delete is working on.
var notDeleting = bson.E{Key: fieldDeleting, Value: bson.D{{Key: "$exists", Value: false}}}

// visible is filter(key) for objects readers may see.
func (r *Resource[S]) visible(key Key) bson.D { return append(r.filter(key), notPending) }

// document is the stored form: key fields, then metadata and spec. Key fields
// are written explicitly because a FerretDB upsert does not copy them from the
// filter.
func (r *Resource[S]) document(key Key, obj Object[S]) bson.D {
	return append(r.filter(key), bson.E{Key: "metadata", Value: obj.Metadata}, bson.E{Key: "spec", Value: obj.Spec})
}

func (r *Resource[S]) checkKey(key Key) {
	if len(key) != len(r.kind.KeyFields()) {
		// A programming error, not a request error: handlers build keys from route variables.
		panic(fmt.Sprintf("catalog: key %v does not fit kind %s", key, r.kind.Name))
	}
}

// parentAlive returns NotFound when the parent object is missing (or still
// being created) and Conflict while it is being deleted.
func (r *Resource[S]) parentAlive(ctx context.Context, parent Key) error {
	if p := r.kind.Parent; p != nil {
		return r.cat.alive(ctx, p, parent)
	}
	return nil
}

// alive returns nil while an object exists, is complete and no live
// delete works on it; NotFound or Conflict otherwise.
func (c *Catalog) alive(ctx context.Context, k *Kind, key Key) error {
	doc, err := c.lookup(ctx, k, key, bson.D{{Key: fieldDeleting, Value: 1}, {Key: fieldDeletingBy, Value: 1}})
	if err != nil {
		return err
	}
	return c.aliveDoc(ctx, k, key, doc)
}

// aliveDoc is alive's verdict on an object's document: Conflict while a
// live delete works on it.
func (c *Catalog) aliveDoc(ctx context.Context, k *Kind, key Key, doc bson.Raw) error {
	if marked, stale := c.staleDoc(ctx, doc, fieldDeleting, fieldDeletingBy); marked && !stale {
		return errdefs.Conflict("%s is being deleted", k.describe(key))
	}
	return nil
}

// lookup returns a visible object's document, from the index when there
// is one (whole) or from MongoDB (projected); NotFound when absent.
func (c *Catalog) lookup(ctx context.Context, k *Kind, key Key, projection bson.D) (bson.Raw, error) {
	if x := c.index(); x != nil {
		doc, _, err := x.read(ctx, k, key)
		if err == nil && doc == nil {
			err = errdefs.NotFound("%s not found", k.describe(key))
		}
		return doc, err
	}
	var doc bson.Raw
	err := c.db.Collection(k.Collection).FindOne(ctx, append(keyFilter(k, key), notPending), options.FindOne().SetProjection(projection)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errdefs.NotFound("%s not found", k.describe(key))
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", k.describe(key), err)
	}
	return doc, nil
}

// parentExists returns NotFound when the parent object is missing; a parent
// being deleted still exists for readers.
func (r *Resource[S]) parentExists(ctx context.Context, parent Key) error {
	p := r.kind.Parent
	if p == nil {
		return nil
	}
	if r.cat.index() != nil {
		_, err := r.cat.lookup(ctx, p, parent, nil)
		return err
	}
	n, err := r.cat.db.Collection(p.Collection).CountDocuments(ctx, append(keyFilter(p, parent), notPending), options.Count().SetLimit(1))
	if err != nil {
		return fmt.Errorf("look up %s: %w", p.describe(parent), err)
	}
	if n == 0 {
		return errdefs.NotFound("%s not found", p.describe(parent))
	}
	return nil
}

// Create stores a new object. The name in obj.Metadata must equal key.Name().
// Racing with the delete of its parent, either the delete sees the new
// object and refuses (409), or Create finds the parent going after its
// insert, removes what it inserted and refuses.
func (r *Resource[S]) Create(ctx context.Context, key Key, obj Object[S]) error {
	return r.create(ctx, key, obj, nil)
}

// CreateWithContent stores a new object and its uploaded file as one step:
// across a crash, either both exist for readers or neither does (see
// the start-up repair).
func (r *Resource[S]) CreateWithContent(ctx context.Context, key Key, obj Object[S], content []byte) error {
	if content == nil {
		content = []byte{}
	}
	return r.create(ctx, key, obj, content)
}

func (r *Resource[S]) create(ctx context.Context, key Key, obj Object[S], content []byte) (err error) {
	r.checkKey(key)
	ctx, guarded, err := r.cat.guard(ctx)
	if err != nil {
		return err
	}
	defer func() { err = guarded(err) }()
	parent := r.kind.ParentKey(key)
	if err := r.parentAlive(ctx, parent); err != nil {
		return err
	}
	x := r.cat.index()
	var rev int64 // the entry's revision before the insert
	if x != nil {
		if _, rev, err = x.read(ctx, r.kind, key); err != nil {
			return err
		}
	}
	doc := r.document(key, obj)
	if err := r.checkWrite(key, doc, nil, int64(len(content))); err != nil {
		return err
	}
	// Under an _id of its own that the intent names: a create that fails
	// leaves no object once its intent is repaired (see undo), even one
	// whose insert MongoDB carried out after the error (it stopped with the
	// request in hand and answered later). One created with content is
	// inserted pending (invisible) and made visible once the content is
	// stored. Millisecond precision, as stored, so the intent matches
	// itself.
	id := primitive.NewObjectID()
	doc = append(bson.D{{Key: "_id", Value: id}}, doc...)
	ic := intentContent{ID: id.Hex()}
	var since time.Time
	if content != nil {
		since = time.Now().UTC().Truncate(time.Millisecond)
		doc = append(doc, r.cat.markerFields(fieldPending, fieldPendingBy, since)...)
		doc = append(doc, contentFields(since, len(content))...)
		ic.Pending, ic.Chunks = &since, chunkCount(len(content))
	}
	in, err := r.cat.begin(ctx, x, r.kind, key, ic)
	if err != nil {
		return err
	}
	defer func() { err = in.end(err) }()
	ins, err := r.coll.InsertOne(ctx, doc)
	if mongo.IsDuplicateKeyError(err) && r.takeOver(ctx, key) {
		ins, err = r.coll.InsertOne(ctx, doc)
	}
	if mongo.IsDuplicateKeyError(err) {
		in.untouched()
		return errdefs.Conflict("%s already exists", r.kind.describe(key))
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", r.kind.describe(key), err)
	}
	// This very document, not another one created under the same key after
	// a concurrent delete of this one.
	mine := bson.D{{Key: "_id", Value: ins.InsertedID}}
	if err = r.complete(ctx, key, mine, parent, since, content); err != nil {
		return r.undoCreate(ctx, key, mine, since, content, err)
	}
	if x == nil {
		return nil
	}
	entry := r.document(key, obj)
	if content != nil {
		entry = append(entry, contentFields(since, len(content))...)
	}
	return r.indexDoc(ctx, x, key, rev, entry, in)
}

// complete finishes a create once the object is inserted: the parent is
// checked again, and an object created with content gets it and becomes
// visible in one write.
func (r *Resource[S]) complete(ctx context.Context, key Key, mine bson.D, parent Key, since time.Time, content []byte) error {
	if err := r.parentAlive(ctx, parent); err != nil {
		return err
	}
	if content == nil {
		return nil
	}
	if err := r.writeContent(ctx, key, since, content); err != nil {
		return err
	}
	res, err := r.coll.UpdateOne(ctx, append(mine, bson.E{Key: fieldPending, Value: since}), bson.D{
		{Key: "$unset", Value: bson.D{{Key: fieldPending, Value: ""}, {Key: fieldPendingBy, Value: ""}}}})
	if err != nil {
		return fmt.Errorf("create %s: %w", r.kind.describe(key), err)
	}
	if res.MatchedCount == 0 { // swept meanwhile: the content goes too
		return errdefs.Conflict("%s was removed while it was being created", r.kind.describe(key))
	}
	return nil
}

// undoCreate removes what a create that failed inserted; what it cannot
// remove now (MongoDB is down) the create's intent repairs later.
func (r *Resource[S]) undoCreate(ctx context.Context, key Key, mine bson.D, since time.Time, content []byte, cause error) error {
	bg := context.WithoutCancel(ctx)
	if _, err := r.coll.DeleteOne(bg, mine); err != nil {
		return errors.Join(cause, fmt.Errorf("undo create %s: %w", r.kind.describe(key), err))
	}
	if content != nil {
		if err := r.dropContent(bg, key, since, chunkCount(len(content))); err != nil {
			return errors.Join(cause, fmt.Errorf("undo create %s: %w", r.kind.describe(key), err))
		}
	}
	return cause
}

// indexDoc writes a document as the object's index entry (see index),
// ending the write's intent.
func (r *Resource[S]) indexDoc(ctx context.Context, x *index, key Key, rev int64, doc bson.D, in *intent) error {
	data, err := bson.Marshal(doc)
	if err != nil {
		return err
	}
	return r.cat.write(ctx, x, r.kind, key, rev, data, in)
}

// entry reads the object's index entry (and its revision) before a write;
// nil index when the catalogue has none.
func (r *Resource[S]) entry(ctx context.Context, key Key) (*index, bson.Raw, int64, error) {
	x := r.cat.index()
	if x == nil {
		return nil, nil, 0, nil
	}
	prev, rev, err := x.read(ctx, r.kind, key)
	return x, prev, rev, err
}

// indexUpdate sets fields of the object's index entry as read (prev, at
// rev) before a MongoDB write; without one, the entry is copied from
// MongoDB. The write's intent ends with it.
func (r *Resource[S]) indexUpdate(ctx context.Context, x *index, key Key, prev bson.Raw, rev int64, set bson.D, in *intent) error {
	if prev == nil {
		return r.cat.refresh(ctx, x, r.kind, key, in)
	}
	data, err := withFields(prev, set)
	if err != nil {
		return err
	}
	return r.cat.write(ctx, x, r.kind, key, rev, data, in)
}

// takeOver removes the intent a dead process left under key, if that is
// what holds it: a write still in flight when its process was killed can
// land after the start-up repair ran, and must not keep the name taken until the next
// restart. It reports whether it removed one.
func (r *Resource[S]) takeOver(ctx context.Context, key Key) bool {
	var doc bson.Raw
	err := r.coll.FindOne(ctx, append(r.filter(key), bson.E{Key: fieldPending, Value: bson.D{{Key: "$exists", Value: true}}}),
		options.FindOne().SetProjection(bson.D{{Key: fieldPending, Value: 1}, {Key: fieldPendingBy, Value: 1}, {Key: fieldContentChunks, Value: 1}})).Decode(&doc)
	if err != nil {
		return false
	}
	since, _ := doc.Lookup(fieldPending).TimeOK()
	if marked, stale := r.cat.staleDoc(ctx, doc, fieldPending, fieldPendingBy); !marked || !stale {
		return false
	}
	res, err := r.coll.DeleteOne(ctx, append(r.filter(key), bson.E{Key: fieldPending, Value: since}))
	if err != nil || res.DeletedCount == 0 {
		return false
	}
	_ = r.dropContent(ctx, key, since, pendingChunks(doc))
	return true
}

// Put creates or replaces an object and reports whether it was created.
func (r *Resource[S]) Put(ctx context.Context, key Key, obj Object[S]) (created bool, err error) {
	r.checkKey(key)
	ctx, guarded, err := r.cat.guard(ctx)
	if err != nil {
		return false, err
	}
	defer func() { err = guarded(err) }()
	if err := r.parentAlive(ctx, r.kind.ParentKey(key)); err != nil {
		return false, err
	}
	// Only a visible object no delete is working on is replaced; a pending
	// or marked one makes the upsert collide with it: 409. $set keeps what
	// the object carries besides its metadata and spec (its content).
	// The key fields are set explicitly: a FerretDB upsert does not copy
	// them from the filter.
	x, prev, rev, err := r.entry(ctx, key)
	if err != nil {
		return false, err
	}
	set := append(r.filter(key), bson.E{Key: "metadata", Value: obj.Metadata}, bson.E{Key: "spec", Value: obj.Spec})
	if err := r.checkWrite(key, set, prev, -1); err != nil {
		return false, err
	}
	in, err := r.cat.begin(ctx, x, r.kind, key, intentContent{})
	if err != nil {
		return false, err
	}
	defer func() { err = in.end(err) }()
	res, err := r.coll.UpdateOne(ctx, append(r.visible(key), notDeleting), bson.D{{Key: "$set", Value: set}}, options.Update().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		// Two concurrent upserts of a new key (the loser sees the winner's
		// insert), or an object being created or deleted.
		in.untouched()
		return false, errdefs.Conflict("%s is being created, deleted or replaced concurrently", r.kind.describe(key))
	}
	if err != nil {
		return false, fmt.Errorf("put %s: %w", r.kind.describe(key), err)
	}
	created = res.UpsertedCount > 0
	if x != nil {
		if created {
			err = r.indexDoc(ctx, x, key, rev, set, in)
		} else {
			err = r.indexUpdate(ctx, x, key, prev, rev, bson.D{{Key: "metadata", Value: obj.Metadata}, {Key: "spec", Value: obj.Spec}}, in)
		}
	}
	return created, err
}

// Replace replaces an existing object; unlike Put it never creates one,
// so a concurrent delete is not undone (NotFound instead).
func (r *Resource[S]) Replace(ctx context.Context, key Key, obj Object[S]) (err error) {
	r.checkKey(key)
	ctx, guarded, err := r.cat.guard(ctx)
	if err != nil {
		return err
	}
	defer func() { err = guarded(err) }()
	// $set, not a whole-document replace: the object keeps its content and
	// markers; a pending object is absent and one being deleted stays so.
	x, prev, rev, err := r.entry(ctx, key)
	if err != nil {
		return err
	}
	set := bson.D{{Key: "metadata", Value: obj.Metadata}, {Key: "spec", Value: obj.Spec}}
	if err := r.checkObject(key, r.document(key, obj)); err != nil {
		return err
	}
	in, err := r.cat.begin(ctx, x, r.kind, key, intentContent{})
	if err != nil {
		return err
	}
	defer func() { err = in.end(err) }()
	res, err := r.coll.UpdateOne(ctx, append(r.visible(key), notDeleting), bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("replace %s: %w", r.kind.describe(key), err)
	}
	if res.MatchedCount == 0 {
		in.untouched()
		return errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if x != nil {
		return r.indexUpdate(ctx, x, key, prev, rev, set, in)
	}
	return nil
}

// Get returns one object, or an error of kind errdefs.ErrNotFound.
func (r *Resource[S]) Get(ctx context.Context, key Key) (Object[S], error) {
	r.checkKey(key)
	var obj Object[S]
	if x := r.cat.index(); x != nil {
		doc, _, err := x.read(ctx, r.kind, key)
		if err != nil {
			return obj, err
		}
		if doc == nil {
			return obj, errdefs.NotFound("%s not found", r.kind.describe(key))
		}
		if err := bson.Unmarshal(doc, &obj); err != nil {
			return obj, fmt.Errorf("get %s: %w", r.kind.describe(key), err)
		}
		return obj, nil
	}
	err := r.coll.FindOne(ctx, r.visible(key)).Decode(&obj)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return obj, errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		return obj, fmt.Errorf("get %s: %w", r.kind.describe(key), err)
	}
	return obj, nil
}

// List returns the objects under parent, sorted by name. A missing parent is
// NotFound, so an empty list always means "none here".
func (r *Resource[S]) List(ctx context.Context, parent Key) ([]Object[S], error) {
	if len(parent) != len(r.kind.KeyFields())-len(r.kind.OwnFields()) {
		panic(fmt.Sprintf("catalog: parent key %v does not fit kind %s", parent, r.kind.Name))
	}
	if r.cat.index() != nil {
		page, err := r.ListPage(ctx, parent, "", 0)
		return page.Items, err
	}
	if err := r.parentExists(ctx, parent); err != nil {
		return nil, err
	}
	sort := bson.D{}
	for _, f := range r.kind.OwnFields() {
		sort = append(sort, bson.E{Key: f, Value: 1})
	}
	cur, err := r.coll.Find(ctx, r.visible(parent), options.Find().SetSort(sort))
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", r.kind.Name, err)
	}
	out := []Object[S]{}
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("list %ss: %w", r.kind.Name, err)
	}
	return out, nil
}

// Delete removes an object and its children of Cascade kinds. It refuses
// with errdefs.ErrConflict while objects of another child kind exist under it
// (or are being created), or while another delete of it runs. Each of before,
// given, runs once the object is marked as being deleted (no child can be
// created under it from then on) and before anything is removed; an error
// from one aborts the delete and is returned.
func (r *Resource[S]) Delete(ctx context.Context, key Key, before ...func(context.Context) error) (err error) {
	r.checkKey(key)
	ctx, guarded, err := r.cat.guard(ctx)
	if err != nil {
		return err
	}
	defer func() { err = guarded(err) }()
	// The intent names the content to drop should the delete stop once
	// the object is gone (see intent).
	x := r.cat.index()
	var content stored
	if doc, lerr := r.cat.lookup(ctx, r.kind, key, contentProjection); lerr == nil {
		_ = bson.Unmarshal(doc, &content)
	}
	ic := intentContent{Gen: content.Gen, Chunks: content.chunks()}
	in, err := r.cat.begin(ctx, x, r.kind, key, ic)
	if err != nil {
		return err
	}
	defer func() { err = in.end(err) }()
	mark := time.Now().UTC().Truncate(time.Millisecond)
	if err := r.markDeleting(ctx, key, mark); err != nil {
		in.untouched()
		return err
	}
	// The index follows each step from MongoDB: deletes are rare, and the
	// mark is what creates of children check.
	reindex := func(ctx context.Context) error {
		if x == nil {
			return nil
		}
		return r.cat.refresh(ctx, x, r.kind, key)
	}
	abort := func(cause error) error {
		_, err := r.coll.UpdateOne(context.WithoutCancel(ctx), append(r.filter(key), bson.E{Key: fieldDeleting, Value: mark}),
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldDeleting, Value: ""}, {Key: fieldDeletingBy, Value: ""}}}})
		if err != nil {
			return errors.Join(cause, fmt.Errorf("unmark %s: %w", r.kind.describe(key), err))
		}
		return errors.Join(cause, reindex(context.WithoutCancel(ctx)))
	}
	if err := reindex(ctx); err != nil {
		return abort(err)
	}
	for _, f := range before {
		if err := f(ctx); err != nil {
			return abort(err)
		}
	}
	var cascade []*Kind
	for _, child := range r.cat.children[r.kind] {
		if child.Cascade {
			cascade = append(cascade, child)
			continue
		}
		// Pending children count: their creators passed the parent check
		// before the mark, and will complete.
		n, err := r.cat.db.Collection(child.Collection).CountDocuments(ctx, r.filter(key), options.Count().SetLimit(1))
		if err != nil {
			return abort(fmt.Errorf("delete %s: check %ss: %w", r.kind.describe(key), child.Name, err))
		}
		if n > 0 {
			return abort(errdefs.Conflict("%s is in use: it still has %ss", r.kind.describe(key), child.Name))
		}
	}
	// Cascading children go first: were the process to die in between, an
	// orphan would be left without a parent to reach it.
	if err := r.deleteCascading(ctx, key, cascade); err != nil {
		return abort(err)
	}
	if _, err := r.coll.DeleteOne(ctx, append(r.filter(key), bson.E{Key: fieldDeleting, Value: mark})); err != nil {
		return abort(fmt.Errorf("delete %s: %w", r.kind.describe(key), err))
	}
	if err := reindex(ctx); err != nil {
		return err
	}
	// From here on the object is gone for readers; a crash leaves at most
	// content without its object, which the intent's repair drops.
	if content.Gen != nil {
		if err := r.cat.dropChunks(ctx, r.kind, key, *content.Gen, content.chunks()); err != nil {
			return fmt.Errorf("delete content of %s: %w", r.kind.describe(key), err)
		}
	}
	// Once more: a cascading child created between the first pass and the
	// mark (its parent check passed) would otherwise be an orphan.
	return r.deleteCascading(ctx, key, cascade)
}

// markDeleting marks an object as being deleted (at mark, by this
// process); a mark another process left and that is stale (see Owner) is
// replaced, one that is live refuses the delete.
func (r *Resource[S]) markDeleting(ctx context.Context, key Key, mark time.Time) error {
	set := bson.D{{Key: "$set", Value: r.cat.markerFields(fieldDeleting, fieldDeletingBy, mark)}}
	res, err := r.coll.UpdateOne(ctx, append(r.visible(key), notDeleting), set)
	if err != nil {
		return fmt.Errorf("delete %s: %w", r.kind.describe(key), err)
	}
	if res.MatchedCount == 1 {
		return nil
	}
	var doc bson.Raw
	err = r.coll.FindOne(ctx, r.visible(key), options.FindOne().SetProjection(bson.D{{Key: fieldDeleting, Value: 1}, {Key: fieldDeletingBy, Value: 1}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", r.kind.describe(key), err)
	}
	if marked, stale := r.cat.staleDoc(ctx, doc, fieldDeleting, fieldDeletingBy); marked && stale {
		old, _ := doc.Lookup(fieldDeleting).TimeOK()
		// Only that mark: another delete taking it over meanwhile wins.
		res, err := r.coll.UpdateOne(ctx, append(r.visible(key), bson.E{Key: fieldDeleting, Value: old}), set)
		if err != nil {
			return fmt.Errorf("delete %s: %w", r.kind.describe(key), err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
	}
	return errdefs.Conflict("%s is already being deleted", r.kind.describe(key))
}

// deleteCascading deletes the children of the given kinds under key, and
// their uploaded contents.
func (r *Resource[S]) deleteCascading(ctx context.Context, key Key, kinds []*Kind) error {
	x := r.cat.index()
	for _, child := range kinds {
		if err := r.cat.dropChildContents(ctx, child, r.filter(key)); err != nil {
			return fmt.Errorf("delete %s: delete its %ss: %w", r.kind.describe(key), child.Name, err)
		}
		if _, err := r.cat.db.Collection(child.Collection).DeleteMany(ctx, r.filter(key)); err != nil {
			return fmt.Errorf("delete %s: delete its %ss: %w", r.kind.describe(key), child.Name, err)
		}
		if x != nil {
			if _, err := x.cli.Delete(ctx, x.children(child, key), clientv3.WithPrefix()); err != nil {
				return errdefs.Unavailable(err, "delete %s: unindex its %ss", r.kind.describe(key), child.Name)
			}
		}
	}
	return nil
}

// Alive returns nil while the object exists, is complete and is not being
// deleted; NotFound or Conflict otherwise. Work started on an object (an
// instantiate, a deploy) checks it again once its effects exist, so a
// concurrent delete either sees the work or the work sees the delete.
func (r *Resource[S]) Alive(ctx context.Context, key Key) error {
	r.checkKey(key)
	return r.cat.alive(ctx, r.kind, key)
}

// CountWhere counts the kind's objects matching filter (field paths such as
// "spec.request.rbName"), for references that are not parent and child.
func (r *Resource[S]) CountWhere(ctx context.Context, filter bson.M) (int64, error) {
	f := bson.D{notPending}
	for k, v := range filter {
		f = append(f, bson.E{Key: k, Value: v})
	}
	n, err := r.coll.CountDocuments(ctx, f, options.Count().SetLimit(1))
	if err != nil {
		return 0, fmt.Errorf("count %ss: %w", r.kind.Name, err)
	}
	return n, nil
}

// Each calls f with every object of the kind, whatever its parent, and its
// key; used to resume work for all of them at start-up.
func (r *Resource[S]) Each(ctx context.Context, f func(Key, Object[S]) error) error {
	return r.each(ctx, bson.D{notPending}, nil, f)
}

// keySort orders documents by their key fields, as the index orders entries.
func (r *Resource[S]) keySort() bson.D {
	sort := bson.D{}
	for _, f := range r.kind.KeyFields() {
		sort = append(sort, bson.E{Key: f, Value: 1})
	}
	return sort
}

// each calls f with every object MongoDB finds by filter (in sort's
// order, when given), and its key.
func (r *Resource[S]) each(ctx context.Context, filter, sort bson.D, f func(Key, Object[S]) error) error {
	opts := options.Find()
	if sort != nil {
		opts.SetSort(sort)
	}
	cur, err := r.coll.Find(ctx, filter, opts)
	if err != nil {
		return fmt.Errorf("list %ss: %w", r.kind.Name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	fields := r.kind.KeyFields()
	for cur.Next(ctx) {
		key := make(Key, len(fields))
		for i, fld := range fields {
			v, ok := cur.Current.Lookup(fld).StringValueOK()
			if !ok {
				return fmt.Errorf("list %ss: document without key field %s", r.kind.Name, fld)
			}
			key[i] = v
		}
		var obj Object[S]
		if err := cur.Decode(&obj); err != nil {
			return fmt.Errorf("list %ss: %w", r.kind.Name, err)
		}
		if err := f(key, obj); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("list %ss: %w", r.kind.Name, err)
	}
	return nil
}
