package catalog

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Catalog is the set of kinds stored in one MongoDB database.
type Catalog struct {
	db       *mongo.Database
	kinds    []*Kind
	children map[*Kind][]*Kind
}

// New prepares the collections of the given kinds (unique key indexes) and
// returns the catalogue. Every kind's parent must be among kinds.
func New(ctx context.Context, db *mongo.Database, kinds ...*Kind) (*Catalog, error) {
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
		if k == DeploymentIntentGroups {
			if err := c.ensureDIGStateIndex(ctx); err != nil {
				return nil, fmt.Errorf("catalog: index digstate: %w", err)
			}
		}
	}
	return c, nil
}

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

// parentExists returns NotFound when the parent object is missing.
func (r *Resource[S]) parentExists(ctx context.Context, parent Key) error {
	p := r.kind.Parent
	if p == nil {
		return nil
	}
	n, err := r.cat.db.Collection(p.Collection).CountDocuments(ctx, For[bson.Raw](r.cat, p).filter(parent), options.Count().SetLimit(1))
	if err != nil {
		return fmt.Errorf("look up %s: %w", p.describe(parent), err)
	}
	if n == 0 {
		return errdefs.NotFound("%s not found", p.describe(parent))
	}
	return nil
}

// Create stores a new object. The name in obj.Metadata must equal key.Name().
func (r *Resource[S]) Create(ctx context.Context, key Key, obj Object[S]) error {
	r.checkKey(key)
	if err := r.parentExists(ctx, r.kind.ParentKey(key)); err != nil {
		return err
	}
	_, err := r.coll.InsertOne(ctx, r.document(key, obj))
	if mongo.IsDuplicateKeyError(err) {
		return errdefs.Conflict("%s already exists", r.kind.describe(key))
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", r.kind.describe(key), err)
	}
	return nil
}

// Put creates or replaces an object and reports whether it was created.
func (r *Resource[S]) Put(ctx context.Context, key Key, obj Object[S]) (created bool, err error) {
	r.checkKey(key)
	if err := r.parentExists(ctx, r.kind.ParentKey(key)); err != nil {
		return false, err
	}
	res, err := r.coll.ReplaceOne(ctx, r.filter(key), r.document(key, obj), options.Replace().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		// Two concurrent upserts of a new key: the loser sees the winner's insert.
		return false, errdefs.Conflict("%s was created concurrently", r.kind.describe(key))
	}
	if err != nil {
		return false, fmt.Errorf("put %s: %w", r.kind.describe(key), err)
	}
	return res.UpsertedCount > 0, nil
}

// Replace replaces an existing object; unlike Put it never creates one,
// so a concurrent delete is not undone (NotFound instead).
func (r *Resource[S]) Replace(ctx context.Context, key Key, obj Object[S]) error {
	r.checkKey(key)
	res, err := r.coll.ReplaceOne(ctx, r.filter(key), r.document(key, obj))
	if err != nil {
		return fmt.Errorf("replace %s: %w", r.kind.describe(key), err)
	}
	if res.MatchedCount == 0 {
		return errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	return nil
}

// Get returns one object, or an error of kind errdefs.ErrNotFound.
func (r *Resource[S]) Get(ctx context.Context, key Key) (Object[S], error) {
	r.checkKey(key)
	var obj Object[S]
	err := r.coll.FindOne(ctx, r.filter(key)).Decode(&obj)
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
	if err := r.parentExists(ctx, parent); err != nil {
		return nil, err
	}
	sort := bson.D{}
	for _, f := range r.kind.OwnFields() {
		sort = append(sort, bson.E{Key: f, Value: 1})
	}
	cur, err := r.coll.Find(ctx, r.filter(parent), options.Find().SetSort(sort))
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
// with errdefs.ErrConflict while objects of another child kind exist under it.
func (r *Resource[S]) Delete(ctx context.Context, key Key) error {
	r.checkKey(key)
	var cascade []*Kind
	for _, child := range r.cat.children[r.kind] {
		if child.Cascade {
			cascade = append(cascade, child)
			continue
		}
		n, err := r.cat.db.Collection(child.Collection).CountDocuments(ctx, r.filter(key), options.Count().SetLimit(1))
		if err != nil {
			return fmt.Errorf("delete %s: check %ss: %w", r.kind.describe(key), child.Name, err)
		}
		if n > 0 {
			return errdefs.Conflict("%s is in use: it still has %ss", r.kind.describe(key), child.Name)
		}
	}
	// Cascading children go first: were the process to die in between, an
	// orphan would be left without a parent to reach it.
	if err := r.deleteCascading(ctx, key, cascade); err != nil {
		return err
	}
	res, err := r.coll.DeleteOne(ctx, r.filter(key))
	if err != nil {
		return fmt.Errorf("delete %s: %w", r.kind.describe(key), err)
	}
	if res.DeletedCount == 0 {
		return errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if _, err := r.contents().DeleteOne(ctx, r.filter(key)); err != nil {
		return fmt.Errorf("delete content of %s: %w", r.kind.describe(key), err)
	}
	// Once more: a child created between the first pass and the parent's
	// removal (its parent check passed) would otherwise be an orphan.
	return r.deleteCascading(ctx, key, cascade)
}

// deleteCascading deletes the children of the given kinds under key, and
// their uploaded contents.
func (r *Resource[S]) deleteCascading(ctx context.Context, key Key, kinds []*Kind) error {
	for _, child := range kinds {
		for _, coll := range []string{child.Collection, child.Collection + "_content"} {
			if _, err := r.cat.db.Collection(coll).DeleteMany(ctx, r.filter(key)); err != nil {
				return fmt.Errorf("delete %s: delete its %ss: %w", r.kind.describe(key), child.Name, err)
			}
		}
	}
	return nil
}

// contents holds uploaded files (kubeconfigs, charts, profiles) apart from
// the objects, so lists never carry them.
func (r *Resource[S]) contents() *mongo.Collection {
	return r.cat.db.Collection(r.kind.Collection + "_content")
}

// PutContent stores the object's uploaded file; the object must exist.
func (r *Resource[S]) PutContent(ctx context.Context, key Key, data []byte) error {
	r.checkKey(key)
	if _, err := r.Get(ctx, key); err != nil {
		return err
	}
	doc := append(r.filter(key), bson.E{Key: "content", Value: data})
	if _, err := r.contents().ReplaceOne(ctx, r.filter(key), doc, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store content of %s: %w", r.kind.describe(key), err)
	}
	return nil
}

// GetContent returns the object's uploaded file, NotFound when there is none.
func (r *Resource[S]) GetContent(ctx context.Context, key Key) ([]byte, error) {
	r.checkKey(key)
	var doc struct {
		Content []byte `bson:"content"`
	}
	err := r.contents().FindOne(ctx, r.filter(key)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errdefs.NotFound("%s has no uploaded content", r.kind.describe(key))
	}
	if err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	return doc.Content, nil
}

// Describe renders a key for messages.
func (r *Resource[S]) Describe(key Key) string { return r.kind.describe(key) }

// CountWhere counts the kind's objects matching filter (field paths such as
// "spec.request.rbName"), for references that are not parent and child.
func (r *Resource[S]) CountWhere(ctx context.Context, filter bson.M) (int64, error) {
	n, err := r.coll.CountDocuments(ctx, filter, options.Count().SetLimit(1))
	if err != nil {
		return 0, fmt.Errorf("count %ss: %w", r.kind.Name, err)
	}
	return n, nil
}

// Each calls f with every object of the kind, whatever its parent, and its
// key; used to resume work for all of them at start-up.
func (r *Resource[S]) Each(ctx context.Context, f func(Key, Object[S]) error) error {
	cur, err := r.coll.Find(ctx, bson.D{})
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
