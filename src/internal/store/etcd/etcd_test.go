package etcd

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The embedded server keeps its data across a restart, even though it binds
// new loopback ports each time.
func TestEmbeddedSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()

	st, err := Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Endpoints()) != 1 {
		t.Fatalf("endpoints = %v", st.Endpoints())
	}
	if _, err := st.Client.Put(ctx, "/argus/test", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	resp, err := st.Client.Get(ctx, "/argus/test")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("after restart got %v", resp.Kvs)
	}
}

func TestExternalEndpointsStartNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	client, err := Open(ctx, Options{Endpoints: server.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if client.Endpoints() != nil {
		t.Fatalf("external mode must not start a server, got %v", client.Endpoints())
	}
	if err := client.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableEndpointFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Open(ctx, Options{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: time.Second})
	if err == nil {
		t.Fatal("expected an error for an endpoint nobody listens on")
	}
}
