package hub

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// splitOptions configure a splitListener.
type splitOptions struct {
	inner   net.Listener
	tls     *tls.Config
	native  *native
	framed  *framed
	timeout time.Duration          // for each handshake
	open    prometheus.Gauge       // optional: connections net/http does not see
	failed  *prometheus.CounterVec // optional: failed handshakes by reason (timeout, plain_http, error)
	logf    func(format string, args ...any)
}

// splitListener accepts from inner, completes each TLS handshake on a
// goroutine of its own (a slow client holds up no other), and sorts the
// connection by the protocol it negotiated: pb.FramedALPN to the framed
// streams' handlers, pb.ALPN to the native gRPC server, the rest to
// Accept.
type splitListener struct {
	opts   splitOptions
	ready  chan net.Conn // handshaken, not native
	errc   chan error    // inner's Accept failed
	ctx    context.Context
	cancel context.CancelFunc
	closed sync.Once
	wg     sync.WaitGroup // the accept loop and the handshakes
}

// newSplitListener starts accepting at once: the handshakes use their own
// configuration, and what they finish waits for Accept.
func newSplitListener(opts splitOptions) *splitListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &splitListener{opts: opts, ready: make(chan net.Conn), errc: make(chan error), ctx: ctx, cancel: cancel}
	l.wg.Go(l.acceptLoop)
	return l
}

// Accept returns the next handshaken connection that is not native.
func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.errc:
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops accepting, ends the handshakes in flight and waits for them.
// Connections already handed over are their servers' to close.
func (l *splitListener) Close() error {
	var err error
	l.closed.Do(func() {
		l.cancel()
		err = l.opts.inner.Close()
		l.wg.Wait()
	})
	return err
}

func (l *splitListener) Addr() net.Addr { return l.opts.inner.Addr() }

// acceptLoop accepts until inner is closed; an error goes to Accept's
// caller, which (net/http) retries a temporary one by calling Accept again.
func (l *splitListener) acceptLoop() {
	for {
		c, err := l.opts.inner.Accept()
		if err != nil {
			select {
			case l.errc <- err:
			case <-l.ctx.Done():
				return
			}
			if !isTemporary(err) {
				return
			}
			continue
		}
		cc := &countedConn{Conn: c, open: l.opts.open}
		if cc.open != nil {
			cc.open.Inc()
		}
		l.wg.Go(func() { l.handshake(cc) })
	}
}

// isTemporary reports an error that net/http backs off from and retries
// (running out of descriptors, a connection reset before it was accepted).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// handshake completes c's TLS handshake within the timeout and passes it on.
func (l *splitListener) handshake(c *countedConn) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.timeout)
	defer cancel()
	tc := tls.Server(c, l.opts.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		reason := failedError
		var rh tls.RecordHeaderError
		switch {
		case errors.As(err, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader[:]):
			// As net/http answers plain HTTP on its TLS port.
			_ = rh.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(rh.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			err, reason = errors.New("client sent an HTTP request to an HTTPS server"), failedPlainHTTP
		case ctx.Err() != nil:
			reason = failedTimeout
		}
		_ = c.Close()
		if l.ctx.Err() == nil { // not the listener closing
			if l.opts.failed != nil {
				l.opts.failed.WithLabelValues(reason).Inc()
			}
			l.opts.logf("http: TLS handshake error from %s: %v", c.RemoteAddr(), err)
		}
		return
	}
	switch tc.ConnectionState().NegotiatedProtocol {
	case pb.FramedALPN:
		l.opts.framed.serve(tc) // counted until its handler closes it
		return
	case pb.ALPN:
		select {
		case l.opts.native.conns <- ownConn{tc}: // counted until gRPC closes it
		case <-l.opts.native.done:
			_ = tc.Close()
		}
		return
	}
	c.uncount() // net/http counts it from here (ConnState)
	select {
	case l.ready <- tc:
	case <-l.ctx.Done():
		_ = tc.Close()
	}
}

// Why a handshake failed (the failure counter's label).
const (
	failedTimeout   = "timeout"    // not done within the server's shortest timeout
	failedPlainHTTP = "plain_http" // an http:// client on the TLS port
	failedError     = "error"      // anything else
)

// countedConn counts itself in a gauge until it is closed or uncounted.
type countedConn struct {
	net.Conn
	open prometheus.Gauge
	once sync.Once
}

func (c *countedConn) uncount() {
	c.once.Do(func() {
		if c.open != nil {
			c.open.Dec()
		}
	})
}

func (c *countedConn) Close() error {
	c.uncount()
	return c.Conn.Close()
}

// looksLikeHTTP reports a TLS record header that is the start of an HTTP
// request instead.
func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO"} {
		if bytes.HasPrefix(hdr, []byte(m)) {
			return true
		}
	}
	return false
}
