package mongo

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/event"
	"go.uber.org/goleak"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
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

// stall forwards loopback connections to target until stopped: then it
// holds every byte (a server that hangs, as one stopped with SIGSTOP).
type stall struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newStall(t *testing.T, target string) *stall {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stall{ln: ln, target: target}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			s.mu.Lock()
			s.conns = append(s.conns, in, out)
			s.mu.Unlock()
			s.wg.Add(2)
			go s.pipe(in, out)
			go s.pipe(out, in)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.stalled.Store(false)
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *stall) pipe(dst, src net.Conn) {
	defer s.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for s.stalled.Load() {
			time.Sleep(10 * time.Millisecond) // holding the bytes is the fault
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// stalledClient is a client (opts, its URI set) of an embedded server
// behind a stall the test can hang; both close with the test.
func stalledClient(t *testing.T, ctx context.Context, opts Options) (*Store, *stall) {
	t.Helper()
	server, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close(context.Background()) })
	u, err := url.Parse(server.EmbeddedURI())
	if err != nil {
		t.Fatal(err)
	}
	st := newStall(t, u.Host)
	u.Host = st.ln.Addr().String()
	opts.URI = u.String()
	client, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	return client, st
}

// A server that hangs is found down within a few heartbeats: Available
// says so, operations fail within the selection timeout instead of
// waiting, and it is up again once the server answers.
func TestAvailableFollowsAHungServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, st := stalledClient(t, ctx, Options{HeartbeatTimeout: 500 * time.Millisecond, ServerSelectionTimeout: 500 * time.Millisecond})
	if err := client.Available(); err != nil {
		t.Fatalf("available before the fault: %v", err)
	}
	st.stalled.Store(true)
	start := time.Now()
	for client.Available() == nil {
		if time.Since(start) > 30*time.Second {
			t.Fatal("a hung server is still available after 30s")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	t.Logf("a hung server found down after %s", time.Since(start).Round(10*time.Millisecond))
	if !errors.Is(client.Available(), errdefs.ErrUnavailable) {
		t.Fatalf("Available = %v, want ErrUnavailable", client.Available())
	}
	start = time.Now()
	if _, err := client.DB.Collection("t").InsertOne(ctx, bson.M{"x": 1}); err == nil {
		t.Fatal("an insert into a hung server succeeded")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an insert into a hung server took %s", took)
	}
	st.stalled.Store(false)
	start = time.Now()
	for client.Available() != nil {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the server answers again but is not available after 30s")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// An operation under Guard in flight when the server hangs fails once
// the server missed its heartbeats (HeartbeatMisses in a row), with the reason as its
// context's cause, not at the operation's own timeout; a guard taken
// while the server is down ends at once.
func TestGuardCutsAnOperationInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, st := stalledClient(t, ctx, Options{HeartbeatTimeout: 500 * time.Millisecond})
	var err error
	gctx, release := client.Guard(ctx)
	defer release()
	st.stalled.Store(true)
	start := time.Now()
	_, err = client.DB.Collection("t").InsertOne(gctx, bson.M{"x": 1})
	took := time.Since(start)
	if err == nil {
		t.Fatal("an insert into a hung server succeeded")
	}
	if !errors.Is(context.Cause(gctx), errdefs.ErrUnavailable) {
		t.Fatalf("the guard's cause = %v, want unavailable (the insert: %v)", context.Cause(gctx), err)
	}
	if took > 10*time.Second { // a loose bound: a missed heartbeat takes 0.5 s to 1 s
		t.Fatalf("the guarded insert took %s", took)
	}
	t.Logf("a guarded insert into a hung server failed after %s: %v", took.Round(10*time.Millisecond), err)
	again, release2 := client.Guard(ctx)
	defer release2()
	if !errors.Is(context.Cause(again), errdefs.ErrUnavailable) {
		t.Fatalf("a guard taken while down: %v", context.Cause(again))
	}
	st.stalled.Store(false)
}

// One missed heartbeat (a stall of the server shorter than a check, as
// embedded FerretDB under load has) neither cuts a guarded write nor
// refuses new ones; HeartbeatMisses in a row do, and a heartbeat answered
// in between starts the count again.
func TestGuardNeedsMissesInARow(t *testing.T) {
	s := &Store{misses: 2}
	mon := s.monitor(logrus.NewEntry(logging.Discard()))
	miss := func() {
		mon.ServerHeartbeatFailed(&event.ServerHeartbeatFailedEvent{Failure: errors.New("i/o timeout")})
	}
	answer := func() { mon.ServerHeartbeatSucceeded(&event.ServerHeartbeatSucceededEvent{}) }
	gctx, release := s.Guard(context.Background())
	defer release()
	for range 3 {
		miss()
		if gctx.Err() != nil || s.Available() != nil {
			t.Fatalf("one missed heartbeat: guard %v, available %v", context.Cause(gctx), s.Available())
		}
		answer()
	}
	miss()
	miss()
	if !errors.Is(context.Cause(gctx), errdefs.ErrUnavailable) || !errors.Is(s.Available(), errdefs.ErrUnavailable) {
		t.Fatalf("two missed in a row: guard %v, available %v", context.Cause(gctx), s.Available())
	}
	answer()
	if s.Available() != nil {
		t.Fatalf("answering again: %v", s.Available())
	}
}
