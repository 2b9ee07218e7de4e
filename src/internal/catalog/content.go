package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Uploaded files (kubeconfigs, charts, profiles) live apart from their
// objects, so lists never carry them, in chunks of contentChunk bytes: a
// write never builds a document (and a wire message) the size of the whole
// file, so storing an upload costs about twice its size, and files are not
// bound by the 16 MiB document limit. Each write is a generation of chunks;
// the object names its current generation (contentGen), so switching to new
// content is one single-document update, and a reader never sees a mix.
const (
	fieldContentGen  = "contentGen"
	fieldContentSize = "contentSize"
	contentChunk     = 1 << 20
)

// contents holds the chunks of every object of the kind.
func (r *Resource[S]) contents() *mongo.Collection {
	return r.cat.db.Collection(r.kind.Collection + "_content")
}

// writeContent stores data as generation gen of key's content.
func (r *Resource[S]) writeContent(ctx context.Context, key Key, gen time.Time, data []byte) error {
	for seq, off := 0, 0; off < len(data) || seq == 0; seq++ {
		end := min(off+contentChunk, len(data))
		doc := append(r.filter(key), bson.E{Key: "gen", Value: gen}, bson.E{Key: "seq", Value: seq}, bson.E{Key: "data", Value: data[off:end]})
		if _, err := r.contents().InsertOne(ctx, doc); err != nil {
			return fmt.Errorf("store content of %s: %w", r.kind.describe(key), err)
		}
		off = end
	}
	return nil
}

// dropContent removes generation gen of key's content.
func (r *Resource[S]) dropContent(ctx context.Context, key Key, gen time.Time) error {
	_, err := r.contents().DeleteMany(ctx, append(r.filter(key), bson.E{Key: "gen", Value: gen}))
	return err
}

// PutContent stores or replaces the uploaded file of an existing object
// (k8splugin uploads content after creating the object).
func (r *Resource[S]) PutContent(ctx context.Context, key Key, data []byte) error {
	r.checkKey(key)
	if err := r.Alive(ctx, key); err != nil {
		return err
	}
	x, prev, rev, err := r.entry(ctx, key)
	if err != nil {
		return err
	}
	if prev != nil {
		if err := r.checkGrowth(key, int64(len(prev)), prev, int64(len(data)), r.cat.getLimits()); err != nil {
			return err
		}
	}
	gen := time.Now().UTC().Truncate(time.Millisecond)
	if err := r.writeContent(ctx, key, gen, data); err != nil {
		_ = r.dropContent(context.WithoutCancel(ctx), key, gen)
		return err
	}
	// The switch returns the generation it displaced: that one, and only
	// that one, is this writer's to drop. Two uploads racing each drop what
	// they replaced, never the one the object names now.
	var displaced struct {
		Gen *time.Time `bson:"contentGen"`
	}
	err = r.coll.FindOneAndUpdate(ctx, append(r.visible(key), notDeleting), bson.D{{Key: "$set", Value: bson.D{
		{Key: fieldContentGen, Value: gen}, {Key: fieldContentSize, Value: int64(len(data))}}}},
		// No projection: FerretDB's findAndModify has none (the object is
		// small; its content lives apart).
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Decode(&displaced)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		_ = r.dropContent(context.WithoutCancel(ctx), key, gen)
		return fmt.Errorf("store content of %s: %w", r.kind.describe(key), err)
	}
	// The displaced generation (or a file stored before content was
	// chunked) is unreachable now; a crash here leaves it to the start-up repair.
	if x != nil {
		if err := r.indexUpdate(ctx, x, key, prev, rev, bson.D{{Key: fieldContentGen, Value: gen}, {Key: fieldContentSize, Value: int64(len(data))}}); err != nil {
			return err
		}
	}
	drop := bson.E{Key: "content", Value: bson.D{{Key: "$exists", Value: true}}} // the legacy whole file
	if displaced.Gen != nil {
		drop = bson.E{Key: "gen", Value: *displaced.Gen}
	}
	if _, err := r.contents().DeleteMany(ctx, append(r.filter(key), drop)); err != nil {
		return fmt.Errorf("store content of %s: drop the previous one: %w", r.kind.describe(key), err)
	}
	return nil
}

// GetContent returns the object's uploaded file, NotFound when there is none
// or the object itself is absent.
func (r *Resource[S]) GetContent(ctx context.Context, key Key) ([]byte, error) {
	r.checkKey(key)
	var obj struct {
		Gen  *time.Time `bson:"contentGen"`
		Size int64      `bson:"contentSize"`
	}
	var err error
	x := r.cat.index()
	if x != nil {
		var doc bson.Raw
		if doc, _, err = x.read(ctx, r.kind, key); err == nil {
			if doc == nil {
				err = mongo.ErrNoDocuments
			} else {
				err = bson.Unmarshal(doc, &obj)
			}
		}
	} else {
		err = r.coll.FindOne(ctx, r.visible(key), options.FindOne().SetProjection(bson.D{{Key: fieldContentGen, Value: 1}, {Key: fieldContentSize, Value: 1}})).Decode(&obj)
	}
	if err == nil && x != nil {
		data, cerr := r.readContent(ctx, key, obj.Gen, obj.Size)
		if cerr == nil {
			return data, nil
		}
		// The index names a generation MongoDB no longer has (the content
		// was replaced behind this catalogue's back): read MongoDB's, and
		// bring the entry up to date.
		if rerr := r.cat.refresh(ctx, x, r.kind, key); rerr != nil {
			return nil, errors.Join(cerr, rerr)
		}
		err = r.coll.FindOne(ctx, r.visible(key), options.FindOne().SetProjection(bson.D{{Key: fieldContentGen, Value: 1}, {Key: fieldContentSize, Value: 1}})).Decode(&obj)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	return r.readContent(ctx, key, obj.Gen, obj.Size)
}

// readContent reads generation gen of the object's content, of size
// bytes; a nil gen is a file stored whole, before chunks.
func (r *Resource[S]) readContent(ctx context.Context, key Key, gen *time.Time, size int64) ([]byte, error) {
	if gen == nil {
		return r.legacyContent(ctx, key)
	}
	obj := struct {
		Gen  *time.Time
		Size int64
	}{gen, size}
	cur, err := r.contents().Find(ctx, append(r.filter(key), bson.E{Key: "gen", Value: *obj.Gen}), options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	out := make([]byte, 0, obj.Size)
	seq := 0
	for cur.Next(ctx) {
		var chunk struct {
			Seq  int    `bson:"seq"`
			Data []byte `bson:"data"`
		}
		if err := cur.Decode(&chunk); err != nil {
			return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
		}
		if chunk.Seq != seq {
			return nil, fmt.Errorf("get content of %s: chunk %d missing", r.kind.describe(key), seq)
		}
		out = append(out, chunk.Data...)
		seq++
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	if seq == 0 || int64(len(out)) != obj.Size {
		return nil, fmt.Errorf("get content of %s: %d of %d bytes stored", r.kind.describe(key), len(out), obj.Size)
	}
	return out, nil
}

// legacyContent reads a file stored whole, before content was chunked.
func (r *Resource[S]) legacyContent(ctx context.Context, key Key) ([]byte, error) {
	var doc struct {
		Content []byte `bson:"content"`
	}
	err := r.contents().FindOne(ctx, append(r.filter(key), bson.E{Key: "content", Value: bson.D{{Key: "$exists", Value: true}}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errdefs.NotFound("%s has no uploaded content", r.kind.describe(key))
	}
	if err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	return doc.Content, nil
}
