package frame

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// WriteTimeout bounds how long the hub's write of a frame may make no
// progress: an agent that reads nothing for that long (its receiver reads
// whatever comes) loses its stream. A large frame to a slow agent takes
// the time it needs. The agent's writes have no such bound: the hub stops
// reading while what it sends waits (its per-agent queue), and the agent
// judges the hub by what it reads.
const WriteTimeout = 30 * time.Second

// ServerStream is an agent's stream on a framed connection, as the hub's
// handler serves it: pb.Fleet_ConnectServer, whose header and trailer
// calls do nothing (the protocol has none).
type ServerStream struct {
	conn  *Conn
	ctx   context.Context
	quiet time.Duration // the longest a Recv waits
}

var _ pb.Fleet_ConnectServer = (*ServerStream)(nil)

// NewServerStream serves conn's stream; a Recv fails once the agent says
// nothing for quiet.
func NewServerStream(ctx context.Context, conn *Conn, quiet time.Duration) *ServerStream {
	return &ServerStream{conn: conn, ctx: ctx, quiet: quiet}
}

func (s *ServerStream) Context() context.Context    { return s.ctx }
func (s *ServerStream) Send(m *pb.HubMessage) error { return s.conn.WriteMessage(m, WriteTimeout) }
func (*ServerStream) SetHeader(metadata.MD) error   { return nil }
func (*ServerStream) SendHeader(metadata.MD) error  { return nil }
func (*ServerStream) SetTrailer(metadata.MD)        {}
func (s *ServerStream) SendMsg(m any) error         { return s.Send(m.(*pb.HubMessage)) }
func (s *ServerStream) RecvMsg(m any) error         { return s.conn.ReadMessage(m.(*pb.AgentMessage), s.quiet) }

// Recv reads the agent's next message. (What ReadMessage does, a call
// shallower: an idle stream's handler parks here.)
func (s *ServerStream) Recv() (*pb.AgentMessage, error) {
	kind, p, err := s.conn.read(s.quiet, time.Time{}, 0)
	if err != nil {
		return nil, err
	}
	m := new(pb.AgentMessage)
	if err := decodeMessage(kind, p, m); err != nil {
		return nil, err
	}
	return m, nil
}

// End sends the stream's end, err's status (nil: OK), within timeout.
func (s *ServerStream) End(err error, timeout time.Duration) error {
	return s.conn.WriteFinal(KindStatus, status.Convert(err).Proto(), timeout)
}

// ClientStream is the agent's side of a framed stream:
// pb.Fleet_ConnectClient. Recv returns the hub's status as a gRPC status
// error (io.EOF for OK), or the connection's error when it ends without
// one.
type ClientStream struct {
	conn  *Conn
	ctx   context.Context
	quiet atomic.Int64 // the longest a Recv waits
}

var _ pb.Fleet_ConnectClient = (*ClientStream)(nil)

// NewClientStream opens the stream on conn with credential; a Recv fails
// once the hub says nothing for quiet (SetQuiet changes it). The caller
// ends the stream by calling conn's Interrupt or Close.
func NewClientStream(ctx context.Context, conn *Conn, credential string, quiet time.Duration) (*ClientStream, error) {
	if err := conn.WriteOpen(credential, WriteTimeout); err != nil { // a fresh connection's buffers take it
		return nil, err
	}
	s := &ClientStream{conn: conn, ctx: ctx}
	s.quiet.Store(int64(quiet))
	return s, nil
}

// SetQuiet sets how long a Recv waits for the hub.
func (s *ClientStream) SetQuiet(d time.Duration) { s.quiet.Store(int64(d)) }

func (s *ClientStream) Context() context.Context   { return s.ctx }
func (*ClientStream) Header() (metadata.MD, error) { return nil, nil }
func (*ClientStream) Trailer() metadata.MD         { return nil }
func (*ClientStream) CloseSend() error             { return nil }
func (s *ClientStream) Send(m *pb.AgentMessage) error {
	// As gRPC's client refuses a message over its limit before sending:
	// the hub would refuse it, and the agent's next report with it.
	if n := proto.Size(m); n > s.conn.max {
		return status.Errorf(codes.ResourceExhausted, "frame: a message of %d bytes, more than the %d allowed", n, s.conn.max)
	}
	return s.conn.WriteMessage(m, 0) // no deadline: see WriteTimeout
}
func (s *ClientStream) SendMsg(m any) error { return s.Send(m.(*pb.AgentMessage)) }
func (s *ClientStream) RecvMsg(m any) error {
	got, err := s.Recv()
	if err != nil {
		return err
	}
	proto.Merge(m.(*pb.HubMessage), got)
	return nil
}

func (s *ClientStream) Recv() (*pb.HubMessage, error) {
	kind, p, err := s.conn.Read(time.Duration(s.quiet.Load()))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	switch kind {
	case KindMessage:
		m := new(pb.HubMessage)
		if err := unmarshal(p, m, codes.Internal); err != nil {
			return nil, err
		}
		return m, nil
	case KindStatus:
		st := new(spb.Status)
		if err := unmarshal(p, st, codes.Internal); err != nil {
			return nil, err
		}
		if st.GetCode() == int32(codes.OK) {
			return nil, io.EOF
		}
		return nil, status.ErrorProto(st)
	}
	return nil, status.Errorf(codes.Internal, "frame: a frame of kind %d from the hub", kind)
}
