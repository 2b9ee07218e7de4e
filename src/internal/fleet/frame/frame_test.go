package frame

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// pipe is both ends of an in-memory connection, framed.
func pipe(t *testing.T) (client, server *Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return NewConn(a, 1<<20), NewConn(b, 1<<20)
}

// A stream carries the credential, messages both ways and the hub's
// status, which the agent gets as a gRPC status error.
func TestStreamRoundTrip(t *testing.T) {
	c, s := pipe(t)
	opened := make(chan *ClientStream, 1)
	go func() {
		cs, err := NewClientStream(t.Context(), c, "secret", 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		opened <- cs
	}()
	cred, err := s.ReadOpen(30 * time.Second)
	if err != nil || cred != "secret" {
		t.Fatalf("open: %q, %v", cred, err)
	}
	cs := <-opened
	ss := NewServerStream(t.Context(), s, 30*time.Second)

	go func() {
		_ = cs.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{Cluster: "edge01"}}})
	}()
	m, err := ss.Recv()
	if err != nil || m.GetHello().GetCluster() != "edge01" {
		t.Fatalf("hub got %v, %v", m, err)
	}
	go func() {
		_ = ss.Send(&pb.HubMessage{Body: &pb.HubMessage_Welcome{Welcome: &pb.Welcome{Session: "s1"}}})
		_ = ss.End(status.Error(codes.Unauthenticated, "revoked"), time.Second)
	}()
	h, err := cs.Recv()
	if err != nil || h.GetWelcome().GetSession() != "s1" {
		t.Fatalf("agent got %v, %v", h, err)
	}
	if _, err := cs.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the stream's end: %v, want Unauthenticated", err)
	}
}

// An OK status ends the agent's stream with io.EOF.
func TestStreamEndsOK(t *testing.T) {
	c, s := pipe(t)
	go func() { _ = NewServerStream(context.Background(), s, time.Second).End(nil, time.Second) }()
	cs := &ClientStream{conn: c, ctx: t.Context()}
	cs.SetQuiet(30 * time.Second)
	if _, err := cs.Recv(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

// Interrupt ends a blocked read and refuses later reads and writes, but
// the stream's status still goes.
func TestInterruptLeavesRoomForTheStatus(t *testing.T) {
	c, s := pipe(t)
	read := make(chan error, 1)
	go func() {
		_, _, err := s.Read(time.Minute)
		read <- err
	}()
	s.Interrupt()
	if err := <-read; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("the blocked read: %v, want ErrInterrupted", err)
	}
	if _, _, err := s.Read(time.Minute); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("a later read: %v, want ErrInterrupted", err)
	}
	if err := s.WriteMessage(&pb.HubMessage{}, time.Second); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("a later write: %v, want ErrInterrupted", err)
	}
	got := make(chan error, 1)
	go func() {
		cs := &ClientStream{conn: c, ctx: t.Context()}
		cs.SetQuiet(30 * time.Second)
		_, err := cs.Recv()
		got <- err
	}()
	if err := NewServerStream(t.Context(), s, time.Minute).End(status.Error(codes.Aborted, "superseded"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-got; status.Code(err) != codes.Aborted {
		t.Fatalf("the status after an interrupt: %v", err)
	}
}

// A frame longer than allowed is refused from its header, before its
// bytes are read or held; an open frame is bounded by MaxOpen.
func TestFrameBounds(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"message", []byte{KindMessage, 0x7f, 0xff, 0xff, 0xff}},
		{"open", AppendRaw(nil, KindOpen, make([]byte, MaxOpen+1))},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := NewConn(&bytesConn{r: bytes.NewReader(c.frame)}, 1<<20)
			if _, _, err := fc.Read(time.Second); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("got %v, want ResourceExhausted", err)
			}
		})
	}
}

// Before its credential a connection may send only the open frame: any
// other kind is refused from its header, its length unread and nothing
// allocated for it.
func TestOpenFrameKindCheckedFromTheHeader(t *testing.T) {
	fc := NewConn(&bytesConn{r: bytes.NewReader([]byte{KindMessage, 0x00, 0x40, 0x00, 0x00})}, 4<<20)
	if _, err := fc.ReadOpen(time.Second); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
}

// bytesConn is a connection that reads from r and writes nowhere.
type bytesConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *bytesConn) SetDeadline(time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzRead feeds arbitrary bytes to the hub's side: it reads the open
// frame and messages until an error, and never panics or returns more
// than it allows.
func FuzzRead(f *testing.F) {
	open := AppendRaw(nil, KindOpen, []byte("cred"))
	hello, _ := Append(nil, KindMessage, &pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{Cluster: "edge01"}}})
	f.Add(append(open, hello...))
	f.Add([]byte{KindMessage, 0, 0, 0, 2, 0x0a, 0xff})
	f.Add([]byte{KindOpen, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := NewConn(&bytesConn{r: bytes.NewReader(data)}, 1<<16)
		if _, err := fc.ReadOpen(time.Second); err != nil {
			return
		}
		s := NewServerStream(t.Context(), fc, time.Second)
		for range 64 {
			if _, err := s.Recv(); err != nil {
				return
			}
		}
	})
}

// A peer not yet authenticated cannot hold a connection by trickling its
// open frame: the frame must be whole by the deadline, however steadily
// its bytes come.
func TestOpenFrameHasADeadline(t *testing.T) {
	c, s := pipe(t)
	frame := AppendRaw(nil, KindOpen, make([]byte, 64))
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for _, b := range frame {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if _, err := c.c.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	if _, err := s.ReadOpen(300 * time.Millisecond); err == nil {
		t.Fatal("a trickled open frame was read whole")
	}
}

// A frame cut off midway (the stream interrupted while the peer read
// slowly) leaves no room for another: the status is not sent after it.
func TestCutFrameBreaksTheConnection(t *testing.T) {
	c, s := pipe(t)
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.WriteMessage(&pb.HubMessage{Body: &pb.HubMessage_Blobs{Blobs: &pb.Blobs{Blobs: []*pb.Blob{{Data: make([]byte, 100<<10)}}}}}, time.Minute)
	}()
	if _, err := io.ReadFull(c.c, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	s.Interrupt()
	if err := <-wrote; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("the cut write: %v, want ErrInterrupted", err)
	}
	if err := NewServerStream(t.Context(), s, time.Minute).End(nil, time.Second); err == nil {
		t.Fatal("a status was written after a cut frame")
	}
}

// The agent refuses to send a message over the limit, as gRPC's client
// does, instead of having the hub refuse it.
func TestClientRefusesAnOversizedMessage(t *testing.T) {
	cs := &ClientStream{conn: NewConn(&bytesConn{r: bytes.NewReader(nil)}, 1<<10), ctx: t.Context()}
	big := &pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{Cluster: string(make([]byte, 2<<10))}}}
	if err := cs.Send(big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
}
