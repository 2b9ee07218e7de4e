package etcd

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
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

// A fatal or panic log from the embedded server — what etcd does when it
// runs out of file descriptors or disk — ends the goroutine that logged
// it, not the process, and readiness then reports the failure.
func TestEmbeddedFatalIsReportedNotFatal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for _, logf := range []func(string, ...zap.Field){st.server.GetLogger().Fatal, st.server.GetLogger().Panic} {
		done := make(chan bool)
		go func() {
			defer close(done)
			logf("failed to purge wal file", zap.Error(syscall.EMFILE))
			done <- true // never reached: the hook ends this goroutine
		}()
		if <-done {
			t.Fatal("the goroutine went on after a fatal log")
		}
	}
	err = st.Ping(ctx)
	if !errors.Is(err, ErrServerFailed) || !strings.Contains(err.Error(), "failed to purge wal file: too many open files") {
		t.Fatalf("Ping = %v", err)
	}
}
