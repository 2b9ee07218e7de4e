package mongo

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEmbeddedSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()

	st, err := Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB.Collection("t").InsertOne(ctx, bson.M{"name": "kept"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}

	st, err = Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	n, err := st.DB.Collection("t").CountDocuments(ctx, bson.M{"name": "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("after restart found %d documents, want 1", n)
	}
}

func TestExternalURIStartsNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close(ctx)

	client, err := Open(ctx, Options{URI: server.EmbeddedURI(), Database: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	if client.EmbeddedURI() != "" {
		t.Fatal("external mode must not start a server")
	}
	if client.DB.Name() != "other" {
		t.Fatalf("database = %q", client.DB.Name())
	}
}
