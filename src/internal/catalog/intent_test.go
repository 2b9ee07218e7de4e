package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// runRepairs runs c's repairer for the test.
func runRepairs(t *testing.T, c *Catalog) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunRepairs(ctx, RepairOptions{Check: 50 * time.Millisecond}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitIntents waits until no write intent is left in etcd.
func waitIntents(t *testing.T, c *Catalog) {
	t.Helper()
	x := c.index()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := x.cli.Get(context.Background(), x.intentsPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("write intents left: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// owned signs a catalogue's markers with a lease the test can revoke.
func owned(t *testing.T, c *Catalog, id string) clientv3.LeaseID {
	t.Helper()
	g, err := env.Etcd.Client.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	c.setOwner(Owner{ID: id, Lease: func() int64 { return int64(g.ID) }, Alive: func(ctx context.Context, lease int64) (bool, error) {
		resp, err := env.Etcd.Client.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err != nil {
			return false, err
		}
		return resp.TTL > 0, nil
	}})
	return g.ID
}

// visibleCreate does what a create of project name does up to its index
// write: the intent, naming the document's _id, and the document,
// inserted visible.
func visibleCreate(ctx context.Context, t *testing.T, c *Catalog, name string, ic intentContent) *intent {
	t.Helper()
	id := primitive.NewObjectID()
	ic.ID = id.Hex()
	in, err := c.begin(ctx, c.index(), Projects, Key{name}, ic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(Projects.Collection).InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "project", Value: name},
		{Key: "metadata", Value: bson.D{{Key: "name", Value: name}}}}); err != nil {
		t.Fatal(err)
	}
	return in
}

// A writer that dies between its MongoDB write and the index's leaves its
// intent; once its lease is gone another replica's repairer copies the
// object into the index and removes the intent — no restart needed.
func TestIntentOfADeadWriterIsRepaired(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		c, ctx := newCatalog(t)
		lease := owned(t, c, "writer")
		projects := For[Empty](c, Projects)
		if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
			t.Fatal(err)
		}
		waitIntents(t, c) // a write that finished leaves none
		// The intent names the _id it inserts, as a create's does: a writer
		// that died without an answer keeps what became visible.
		in := visibleCreate(ctx, t, c, "q", intentContent{})
		c.inflight.Delete(in.key) // the writer is gone (its process with it)
		if _, err := projects.Get(ctx, Key{"q"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the index has the object before any repair: %v", err)
		}
		other, _ := newCatalog(t)
		other.db = c.db
		other.idx = c.index()
		owned(t, other, "repairer")
		runRepairs(t, other)
		if _, err := env.Etcd.Client.Revoke(ctx, lease); err != nil {
			t.Fatal(err)
		}
		waitIntents(t, c)
		if _, err := projects.Get(ctx, Key{"q"}); err != nil {
			t.Fatalf("the repaired index lacks the object: %v", err)
		}
	})
}

// A create with content whose writer failed midway (MongoDB went away
// after the insert) leaves nothing half made once the repairer can reach
// MongoDB: the pending object and its chunks go, the name is free.
func TestEndedIntentIsUndone(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		c, ctx := newCatalog(t)
		owned(t, c, "writer")
		projects := For[Empty](c, Projects)
		apps := For[appSpec](c, testApps)
		if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
			t.Fatal(err)
		}
		key := Key{"p", "a"}
		since := time.Now().UTC().Truncate(time.Millisecond)
		data := make([]byte, contentChunk+10)
		in, err := c.begin(ctx, c.index(), testApps, key, intentContent{Pending: &since, Chunks: chunkCount(len(data))})
		if err != nil {
			t.Fatal(err)
		}
		doc := append(apps.document(key, Object[appSpec]{Metadata: Metadata{Name: "a"}}), c.markerFields(fieldPending, fieldPendingBy, since)...)
		if _, err := c.db.Collection(testApps.Collection).InsertOne(ctx, append(doc, contentFields(since, len(data))...)); err != nil {
			t.Fatal(err)
		}
		if err := apps.writeContent(ctx, key, since, data); err != nil {
			t.Fatal(err)
		}
		in.end(errors.New("the store went away")) // what a failed create does
		runRepairs(t, c)
		waitIntents(t, c)
		for _, coll := range []string{testApps.Collection, contentCollection(testApps)} {
			if n, _ := c.db.Collection(coll).CountDocuments(ctx, bson.D{{Key: "testapp", Value: "a"}}); n != 0 {
				t.Fatalf("%s holds %d documents of the undone create", coll, n)
			}
		}
		if err := apps.CreateWithContent(ctx, key, Object[appSpec]{Metadata: Metadata{Name: "a"}}, []byte("chart")); err != nil {
			t.Fatalf("create after the repair: %v", err)
		}
		waitIntents(t, c)
	})
}

// A restart prepares the collections again: every index exists already
// (FerretDB v1 drops the connection if one request names several such).
func TestNewAgainOnTheSameDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := env.Database(t)
	for range 2 {
		if _, _, err := Open(ctx, Options{DB: db}); err != nil {
			t.Fatal(err)
		}
	}
}
