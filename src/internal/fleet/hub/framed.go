package hub

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/argus-mc/argus/src/internal/fleet/frame"
)

// framed serves the TLS connections that negotiated pb.FramedALPN: one
// goroutine each, the stream's handler, which reads the agent's frames
// itself. Nothing else of the connection's runs while the agent is idle:
// no HTTP/2 reader, writer or keepalive timer (docs/architecture.md,
// "Fleet transport").
type framed struct {
	h      *Hub
	ctx    context.Context // ends every framed stream
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // the handlers
}

func newFramed(h *Hub) *framed {
	ctx, cancel := context.WithCancel(context.Background())
	return &framed{h: h, ctx: ctx, cancel: cancel}
}

// serve serves c's stream on a goroutine of its own until it ends; after
// close, it closes c.
func (f *framed) serve(c net.Conn) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		_ = c.Close()
		return
	}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		if serve := f.h.openFramed(f.ctx, c); serve != nil {
			serve()
		}
	}()
}

// close ends every framed stream (each gets its status if it can take
// it), refuses new ones and waits for their handlers.
func (f *framed) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// endTimeout bounds the write of a stream's status, and then how long the
// connection lingers for it to reach the agent.
const endTimeout = 5 * time.Second

// openFramed reads a framed connection's open frame (the credential) and
// starts its session as for any other stream; it returns what serves the
// stream from then on — then sends its status and closes the connection
// — or nil once the connection is done with. Apart so that the stream's
// wait runs on a shallow stack: an idle agent's goroutine then parks
// using little enough of it for the collector to shrink it to 8 KiB,
// where the start's frames, kept beneath, held it at 16.
func (h *Hub) openFramed(ctx context.Context, c net.Conn) func() {
	fc := frame.NewConn(c, maxMessage)
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		fc.Interrupt()
	})
	end := func(stream *frame.ServerStream, err error) {
		if !stop() {
			<-interrupted // its past deadlines land before the status's
		}
		linger, wait := endTimeout, endTimeout
		if ctx.Err() != nil {
			// The hub stops: its agents reconnect elsewhere, and a dead one
			// must not hold the stop up.
			linger, wait = 0, time.Second
			err = status.Error(codes.Unavailable, "the orchestrator is stopping")
		}
		if stream == nil {
			linger = 0 // no stream, nothing to deliver
		} else if werr := stream.End(err, wait); werr != nil {
			h.log.WithError(werr).WithFields(logrus.Fields{"remote": c.RemoteAddr().String(), "status": err}).Debug("cannot send a framed stream's status")
		}
		_ = fc.CloseLinger(linger)
	}
	cred, err := fc.ReadOpen(helloTimeout)
	if err != nil {
		h.log.WithError(err).WithField("remote", c.RemoteAddr().String()).Debug("a framed connection opened no stream")
		end(nil, nil)
		return nil
	}
	stream := frame.NewServerStream(ctx, fc, h.framedQuiet())
	s, err := h.open(stream, transportFramed, cred)
	if err != nil {
		end(stream, err)
		return nil
	}
	return func() { end(stream, s.serve(interrupter{fc})) }
}

// framedQuiet is how long a framed stream's agent may send nothing before
// the stream ends: long enough for the Silent verdict (SilentAfter) to be
// seen first, and for three missed heartbeats. gRPC's keepalive pings
// would tell a live agent that sends nothing from a dead peer; a framed
// stream has only the agent's reports, so it ends a while after the agent
// went silent, which a dead peer's stream does too.
func (h *Hub) framedQuiet() time.Duration {
	return max(2*h.opts.SilentAfter, 3*h.opts.Heartbeat)
}

// interrupter ends a framed stream as serveOwnConn ends its connection:
// reads and writes stop, and the connection stays open for the status.
type interrupter struct{ c *frame.Conn }

func (i interrupter) Close() error {
	i.c.Interrupt()
	return nil
}
