package catalog

import (
	"context"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// ensureIndexes gives every field the catalogue queries an index, beside
// the key's unique one: the markers Recover and takeOver look for, the
// kind's Queried fields, and its content collection's key, generation and
// place (the order chunks stored before they had ids are read in).
// MongoDB uses them; FerretDB v1 creates them and reads by _id alone
// without a scan, which is why chunks are read by _id (see chunkID).
func (c *Catalog) ensureIndexes(ctx context.Context, k *Kind) error {
	var models []mongo.IndexModel
	for _, f := range []string{fieldPending, fieldDeleting} {
		models = append(models, mongo.IndexModel{Keys: bson.D{{Key: f, Value: 1}}, Options: options.Index().SetSparse(true).SetName(f)})
	}
	for _, f := range k.Queried {
		models = append(models, mongo.IndexModel{Keys: bson.D{{Key: f, Value: 1}}, Options: options.Index().SetName(f)})
	}
	for _, m := range models {
		// One at a time: FerretDB v1 drops the connection when one
		// createIndexes names several indexes that exist already.
		if _, err := c.db.Collection(k.Collection).Indexes().CreateOne(ctx, m); err != nil {
			return err
		}
	}
	chunks := bson.D{}
	for _, f := range k.KeyFields() {
		chunks = append(chunks, bson.E{Key: f, Value: 1})
	}
	chunks = append(chunks, bson.E{Key: "gen", Value: 1}, bson.E{Key: "seq", Value: 1})
	_, err := c.db.Collection(contentCollection(k)).Indexes().CreateOne(ctx, mongo.IndexModel{Keys: chunks, Options: options.Index().SetName("chunks")})
	return err
}
