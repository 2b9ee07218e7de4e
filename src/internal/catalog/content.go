package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
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
//
// Each chunk's _id is made of its object's key, its generation and its
// place (chunkID), and the object records how many there are
// (contentChunks): a file is read, and dropped, chunk by chunk by _id,
// the one query FerretDB v1 answers without reading its whole collection
// (with MongoDB, the content collections' index on key, generation and
// place serves the older chunks, stored before they had such ids).
const (
	fieldContentGen    = "contentGen"
	fieldContentSize   = "contentSize"
	fieldContentChunks = "contentChunks"
	contentChunk       = 1 << 20
)

// contentCollection is where kind k's chunks live.
func contentCollection(k *Kind) string { return k.Collection + "_content" }

// contents holds the chunks of every object of the kind.
func (r *Resource[S]) contents() *mongo.Collection {
	return r.cat.db.Collection(contentCollection(r.kind))
}

// chunkID is the _id of chunk seq of generation gen of key's content.
func chunkID(key Key, gen time.Time, seq int) string {
	var b strings.Builder
	for _, part := range key {
		b.WriteString(url.PathEscape(part))
		b.WriteByte('/')
	}
	b.WriteString(strconv.FormatInt(gen.UnixMilli(), 10))
	b.WriteByte('/')
	b.WriteString(strconv.Itoa(seq))
	return b.String()
}

// chunkCount is how many chunks a file of size bytes takes (one at least:
// an empty file is one empty chunk).
func chunkCount(size int) int { return max(1, (size+contentChunk-1)/contentChunk) }

// writeContent stores data as generation gen of key's content.
func (r *Resource[S]) writeContent(ctx context.Context, key Key, gen time.Time, data []byte) error {
	for seq, off := 0, 0; off < len(data) || seq == 0; seq++ {
		end := min(off+contentChunk, len(data))
		doc := append(bson.D{{Key: "_id", Value: chunkID(key, gen, seq)}}, r.filter(key)...)
		doc = append(doc, bson.E{Key: "gen", Value: gen}, bson.E{Key: "seq", Value: seq}, bson.E{Key: "data", Value: data[off:end]})
		if _, err := r.contents().InsertOne(ctx, doc); err != nil {
			return fmt.Errorf("store content of %s: %w", r.kind.describe(key), err)
		}
		off = end
	}
	return nil
}

// dropContent removes generation gen of key's content, of n chunks.
func (r *Resource[S]) dropContent(ctx context.Context, key Key, gen time.Time, n int) error {
	return r.cat.dropChunks(ctx, r.kind, key, gen, n)
}

// dropChunks removes n chunks of generation gen of kind k's object key,
// by _id; n < 0 is a generation stored before chunks had such ids, found
// by a query.
func (c *Catalog) dropChunks(ctx context.Context, k *Kind, key Key, gen time.Time, n int) error {
	coll := c.db.Collection(contentCollection(k))
	if n < 0 {
		_, err := coll.DeleteMany(ctx, append(keyFilter(k, key), bson.E{Key: "gen", Value: gen}))
		return err
	}
	for seq := range n {
		if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: chunkID(key, gen, seq)}}); err != nil {
			return fmt.Errorf("drop content of %s: %w", k.describe(key), err)
		}
	}
	return nil
}

// stored is what an object's document says of its content.
type stored struct {
	Gen    *time.Time `bson:"contentGen"`
	Size   int64      `bson:"contentSize"`
	Chunks *int       `bson:"contentChunks"`
}

// chunks is the stored generation's chunk count, -1 when it was stored
// before chunks had ids.
func (s stored) chunks() int {
	if s.Chunks == nil {
		return -1
	}
	return *s.Chunks
}

// dropStored removes the content an object's document names: nothing
// for one without content (nor for a file stored whole, before chunks:
// finding it would read the whole collection, so it stays, unread).
func (c *Catalog) dropStored(ctx context.Context, k *Kind, key Key, doc bson.Raw) error {
	var s stored
	if doc == nil || bson.Unmarshal(doc, &s) != nil || s.Gen == nil {
		return nil
	}
	return c.dropChunks(ctx, k, key, *s.Gen, s.chunks())
}

// pendingChunks is the chunk count a document inserted with its content
// records; -1 when it records none (stored before chunks had ids).
func pendingChunks(doc bson.Raw) int {
	n, ok := doc.Lookup(fieldContentChunks).AsInt64OK()
	if !ok {
		return -1
	}
	return int(n)
}

// contentFields are what an object records of content stored as gen.
func contentFields(gen time.Time, size int) bson.D {
	return bson.D{{Key: fieldContentGen, Value: gen}, {Key: fieldContentSize, Value: int64(size)}, {Key: fieldContentChunks, Value: chunkCount(size)}}
}

// PutContent stores or replaces the uploaded file of an existing object
// (k8splugin uploads content after creating the object).
func (r *Resource[S]) PutContent(ctx context.Context, key Key, data []byte) (err error) {
	r.checkKey(key)
	ctx, guarded, err := r.cat.guard(ctx)
	if err != nil {
		return err
	}
	defer func() { err = guarded(err) }()
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
	// The new generation is the intent's: should this writer stop before
	// the object names it, it is dropped (see intent).
	in, err := r.cat.begin(ctx, x, r.kind, key, intentContent{Gen: &gen, Chunks: chunkCount(len(data))})
	if err != nil {
		return err
	}
	defer func() { err = in.end(err) }()
	if err = r.writeContent(ctx, key, gen, data); err != nil {
		return err
	}
	// The switch returns the generation it displaced: that one, and only
	// that one, is this writer's to drop. Two uploads racing each drop what
	// they replaced, never the one the object names now.
	var displaced bson.Raw
	err = r.coll.FindOneAndUpdate(ctx, append(r.visible(key), notDeleting), bson.D{{Key: "$set", Value: contentFields(gen, len(data))}},
		// No projection: FerretDB's findAndModify has none (the object is
		// small; its content lives apart).
		options.FindOneAndUpdate().SetReturnDocument(options.Before)).Decode(&displaced)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		return fmt.Errorf("store content of %s: %w", r.kind.describe(key), err)
	}
	if x != nil {
		if err = r.indexUpdate(ctx, x, key, prev, rev, contentFields(gen, len(data)), in); err != nil {
			return err
		}
	}
	// The displaced generation (or a file stored before content was
	// chunked) is unreachable now; should this fail, the intent's repair
	// does not know it: it stays, unread.
	if err := r.cat.dropStored(ctx, r.kind, key, displaced); err != nil {
		r.cat.log().WithError(err).WithField("object", r.kind.describe(key)).Warn("cannot drop an object's previous content")
	}
	return nil
}

// GetContent returns the object's uploaded file, NotFound when there is none
// or the object itself is absent.
func (r *Resource[S]) GetContent(ctx context.Context, key Key) ([]byte, error) {
	r.checkKey(key)
	var obj stored
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
		err = r.coll.FindOne(ctx, r.visible(key), options.FindOne().SetProjection(contentProjection)).Decode(&obj)
	}
	if err == nil && x != nil {
		data, cerr := r.readContent(ctx, key, obj)
		if cerr == nil {
			return data, nil
		}
		// The index names a generation MongoDB no longer has (the content
		// was replaced behind this catalogue's back): read MongoDB's, and
		// bring the entry up to date.
		if rerr := r.cat.refresh(ctx, x, r.kind, key); rerr != nil {
			return nil, errors.Join(cerr, rerr)
		}
		err = r.coll.FindOne(ctx, r.visible(key), options.FindOne().SetProjection(contentProjection)).Decode(&obj)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errdefs.NotFound("%s not found", r.kind.describe(key))
	}
	if err != nil {
		return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
	}
	return r.readContent(ctx, key, obj)
}

// contentProjection is what a read of the content needs of its object.
var contentProjection = bson.D{{Key: fieldContentGen, Value: 1}, {Key: fieldContentSize, Value: 1}, {Key: fieldContentChunks, Value: 1}}

// readContent reads the content obj names: chunk by chunk by _id; by
// query when it was stored before chunks had ids; a nil gen is a file
// stored whole, before chunks.
func (r *Resource[S]) readContent(ctx context.Context, key Key, obj stored) ([]byte, error) {
	if obj.Gen == nil {
		return r.legacyContent(ctx, key)
	}
	if obj.Chunks != nil {
		return r.readChunks(ctx, key, obj)
	}
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

// readChunks reads the chunks of a generation stored with ids.
func (r *Resource[S]) readChunks(ctx context.Context, key Key, obj stored) ([]byte, error) {
	out := make([]byte, 0, obj.Size)
	for seq := range *obj.Chunks {
		var chunk struct {
			Data []byte `bson:"data"`
		}
		err := r.contents().FindOne(ctx, bson.D{{Key: "_id", Value: chunkID(key, *obj.Gen, seq)}}).Decode(&chunk)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, fmt.Errorf("get content of %s: chunk %d missing", r.kind.describe(key), seq)
		}
		if err != nil {
			return nil, fmt.Errorf("get content of %s: %w", r.kind.describe(key), err)
		}
		out = append(out, chunk.Data...)
	}
	if int64(len(out)) != obj.Size {
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

// dropChildContents drops the content of kind k's objects matching filter
// (a parent's children, going with it): each object's chunks by _id,
// read from the objects, never by a query over the contents.
func (c *Catalog) dropChildContents(ctx context.Context, k *Kind, filter bson.D) error {
	proj := slices.Clone(contentProjection)
	for _, f := range k.KeyFields() {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	cur, err := c.db.Collection(k.Collection).Find(ctx, filter, options.Find().SetProjection(proj))
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		key := make(Key, len(k.KeyFields()))
		for i, f := range k.KeyFields() {
			key[i], _ = cur.Current.Lookup(f).StringValueOK()
		}
		if err := c.dropStored(ctx, k, key, cur.Current); err != nil {
			return err
		}
	}
	return cur.Err()
}
