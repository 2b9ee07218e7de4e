package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// fill writes values of size under distinct keys (live data) or one key
// (history) until etcd refuses with NOSPACE; it returns how many went in.
func fill(ctx context.Context, t *testing.T, st *Store, prefix string, size int, distinct bool) int {
	t.Helper()
	val := strings.Repeat("x", size)
	for i := 0; i < 10000; i++ {
		key := prefix
		if distinct {
			key = fmt.Sprintf("%s/%05d", prefix, i)
		}
		if _, err := st.Client.Put(ctx, key, val); err != nil {
			if !errors.Is(err, rpctypes.ErrNoSpace) {
				t.Fatalf("put %d: %v", i, err)
			}
			return i
		}
	}
	t.Fatal("etcd never ran out of space")
	return 0
}

// Out of space with history only, maintenance compacts, defragments and
// disarms the alarm; out of space with live data, the alarm stays and
// NoSpace says so until the data is deleted. Reads work throughout.
func TestMaintainRecoversFromNoSpace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const quota = 16 << 20
	st, err := Open(ctx, Options{DataDir: t.TempDir(), QuotaBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	writable := 0
	opts := MaintainOptions{Writable: func(context.Context) { writable++ }}

	n := fill(ctx, t, st, "/history", 256<<10, false)
	st.MaintainOnce(ctx, opts)
	if err := st.NoSpace(); err != nil || writable != 1 {
		t.Fatalf("after %d overwrites: NoSpace = %v, writable passes %d", n, err, writable)
	}
	if _, err := st.Client.Put(ctx, "/after", "ok"); err != nil {
		t.Fatalf("write after maintenance: %v", err)
	}
	t.Logf("history of %d overwrites of 256 KiB (quota %d MiB) compacted, defragmented and disarmed", n, quota>>20)

	// Where etcd first refuses depends on how its file fragmented under
	// the writes: when the live data fits four fifths of the quota once
	// defragmented, maintenance rightly disarms; the test then writes
	// more, until the live data alone holds the alarm.
	n, wantWritable := 0, 2
	for round := 0; ; round++ {
		n += fill(ctx, t, st, fmt.Sprintf("/live/%d", round), 256<<10, true)
		st.MaintainOnce(ctx, opts)
		err := st.NoSpace()
		if errors.Is(err, ErrNoSpace) && strings.Contains(err.Error(), "--etcd-quota-bytes") {
			break
		}
		status, serr := st.Client.Status(ctx, st.embedded[0])
		if err != nil || serr != nil || status.DbSize > quota-quota/5 || round == 4 {
			t.Fatalf("with %d live values (round %d): NoSpace = %v; status %v, %v", n, round, err, status, serr)
		}
		wantWritable++ // the disarming pass called Writable
		t.Logf("round %d: %d live values fit in %d bytes once defragmented; disarmed, writing more", round, n, status.DbSize)
	}
	if _, err := st.Client.Get(ctx, "/after"); err != nil {
		t.Fatalf("read under NOSPACE: %v", err)
	}
	if _, err := st.Client.Delete(ctx, "/live/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	st.MaintainOnce(ctx, opts)
	if err := st.NoSpace(); err != nil || writable != wantWritable {
		t.Fatalf("after deleting the live data: NoSpace = %v, writable passes %d, want %d", err, writable, wantWritable)
	}
	if _, err := st.Client.Put(ctx, "/after", "again"); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
}
