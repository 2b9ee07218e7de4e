package hub

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"

	pb "github.com/argus-mc/argus/src/apis/fleet"
)

// The transports a stream can come on (the streams metric's label).
const (
	transportNative = "native" // gRPC's own HTTP/2, TLS negotiated pb.ALPN
	transportHTTP2  = "http2"  // net/http's HTTP/2, through Handler
	transportFramed = "framed" // the stream's own framing, TLS negotiated pb.FramedALPN
)

// native serves the TLS connections that negotiated pb.ALPN with a gRPC
// server on its own transport: per idle stream it holds no pooled read
// buffer, no net/http connection state and fewer goroutines than
// ServeHTTP on net/http's HTTP/2 server, and writes frames in batches
// (docs/architecture.md, "Fleet transport"). ListenTLS's listener
// completes each TLS handshake and passes those connections, through a
// listener fed by a channel, to the gRPC server: net/http never sees
// them, so no goroutine of its own waits on each for its life.
type native struct {
	srv   *grpc.Server
	conns chan net.Conn // unbuffered: a connection is either accepted or not
	done  chan struct{} // closed by close
	once  sync.Once
	start sync.Once
	wg    sync.WaitGroup // the server's Serve
}

// nativeServerOptions are the native server's options, chosen for many
// idle streams: no read buffer (the TLS connection buffers a record
// already), a write buffer shared from a pool instead of one per
// connection, and the message limits and keepalive enforcement of the
// Handler path's server. A peer silent for 30 s is probed and dropped 15 s
// later, as serveHTTP2 does on the API's server; agents ping and report
// more often than that, so the probe costs nothing while they live.
func nativeServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A connection with no stream for 2 minutes (the API's idle
		// timeout) is closed: the token is asked for only when a stream
		// opens, and a client that never opens one would otherwise hold
		// a connection slot forever. An agent always holds its stream.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 15 * time.Second, MaxConnectionIdle: 2 * time.Minute}),
		// Fixed flow-control windows: gRPC's default sizes them by
		// pinging the peer after data arrives (BDP estimation), a ping and
		// its answer for each heartbeat of each agent — most of an idle
		// fleet's packets. A stream buffers at most its window (64 KiB, the
		// default's start; gRPC opens it to a whole message once the hub
		// reads that message), and the connection's 256 KiB paces a large
		// report.
		grpc.InitialWindowSize(64 << 10), grpc.InitialConnWindowSize(256 << 10),
		grpc.ReadBufferSize(0),
		grpc.WriteBufferSize(16 << 10),
		grpc.SharedWriteBuffer(true),
		// An agent holds one stream; a few more for one being replaced.
		grpc.MaxConcurrentStreams(8),
		// The agent's metadata is a bearer token: bound what a peer may
		// send as headers well below gRPC's default of 16 MiB.
		grpc.MaxHeaderListSize(64 << 10),
		// The HTTP/2 preface and settings, after ListenTLS's TLS handshake.
		grpc.ConnectionTimeout(10 * time.Second),
	}
}

func newNative(h *Hub, opts ...grpc.ServerOption) *native {
	n := &native{srv: grpc.NewServer(opts...), conns: make(chan net.Conn), done: make(chan struct{})}
	pb.RegisterFleetServer(n.srv, nativeFleet{h})
	return n
}

// nativeFleet is the Fleet service as the native server serves it: the
// hub's, its streams labelled.
type nativeFleet struct{ *Hub }

func (n nativeFleet) Connect(stream pb.Fleet_ConnectServer) error {
	return n.connect(stream, transportNative, bearer(stream.Context()), streamConn(stream.Context()))
}

// serve starts the gRPC server, once, until close: from ListenTLS on,
// so a connection handed over never waits for the hub's Run (which may
// wait for etcd); streams are refused until the hub has started.
func (n *native) serve() {
	n.start.Do(func() {
		n.wg.Go(func() { _ = n.srv.Serve(nativeListener{n}) })
	})
}

// close ends every native stream and connection, refuses new ones (the
// split listener closes those) and waits for the server.
func (n *native) close() {
	n.once.Do(func() { close(n.done) })
	n.srv.Stop()
	n.wg.Wait()
}

// ownConn is a native connection as the gRPC server gets it. Its remote
// address, which gRPC hands each of its streams as the peer's, leads back
// to it: a session ends its stream by closing the connection, the one
// way to end a Recv short of its handler returning, so the handler can
// do the receiving itself (serveOwnConn). An agent opens one stream a
// connection; a client that opens more loses them all with one.
type ownConn struct{ net.Conn }

func (c ownConn) RemoteAddr() net.Addr { return connAddr{Addr: c.Conn.RemoteAddr(), conn: c.Conn} }

// connAddr is a native connection's remote address, and the connection.
type connAddr struct {
	net.Addr
	conn io.Closer
}

// streamConn is the connection of a stream served natively; nil for one
// that came through Handler, whose connection others may share.
func streamConn(ctx context.Context) io.Closer {
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(connAddr); ok {
			return a.conn
		}
	}
	return nil
}

// nativeListener gives the gRPC server the connections handed over.
type nativeListener struct{ n *native }

func (l nativeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.n.conns:
		return c, nil
	case <-l.n.done:
		return nil, net.ErrClosed
	}
}

func (l nativeListener) Close() error {
	l.n.once.Do(func() { close(l.n.done) })
	return nil
}

func (nativeListener) Addr() net.Addr { return nativeAddr{} }

type nativeAddr struct{}

func (nativeAddr) Network() string { return "tls" }
func (nativeAddr) String() string  { return pb.ALPN }

// ListenOptions configure ListenTLS.
type ListenOptions struct {
	// Open, if set, counts the connections the listener holds that
	// net/http never sees — those in their handshake and the agents'
	// (native) ones — for the gauge net/http's ConnState feeds with the
	// rest: together, what holds slots of the connection cap.
	Open prometheus.Gauge
}

// ListenTLS returns the listener srv.Serve serves srv.TLSConfig's TLS on:
// it completes each connection's handshake itself, hands those that
// negotiated pb.FramedALPN to the hub's framed streams and those that
// negotiated pb.ALPN to its native gRPC server, and returns the rest (h2,
// HTTP/1.1), handshaken, to srv. The two are listed first, in that order:
// Go's TLS server picks by its own preference, so an agent gets the best
// it offers, and every other client negotiates as before. An agent's
// connection holds its slot of ln (a connection cap) until it closes. Call it after
// setting srv.TLSConfig and srv.Protocols, and serve with srv.Serve (not
// ServeTLS); srv.TLSConfig is replaced by one that names the protocols,
// which is how net/http's Serve knows to set up HTTP/2.
func (h *Hub) ListenTLS(srv *http.Server, ln net.Listener, opts ListenOptions) net.Listener {
	cfg := srv.TLSConfig.Clone()
	protos := []string{pb.FramedALPN, pb.ALPN}
	if h.opts.grpcOnly {
		protos = protos[1:]
	}
	if srv.Protocols == nil || srv.Protocols.HTTP2() {
		protos = append(protos, "h2")
	}
	protos = append(protos, "http/1.1")
	for _, p := range cfg.NextProtos {
		if !slices.Contains(protos, p) {
			protos = append(protos, p)
		}
	}
	cfg.NextProtos = protos
	// net/http's own copy (its HTTP/2 set-up writes to it); the
	// handshakes use cfg.
	srv.TLSConfig = cfg.Clone()
	logf := log.Printf // as net/http logs without an ErrorLog
	if srv.ErrorLog != nil {
		logf = srv.ErrorLog.Printf
	}
	h.native.serve()
	return newSplitListener(splitOptions{inner: ln, tls: cfg, native: h.native, framed: h.framed, timeout: handshakeTimeout(srv),
		open: opts.Open, failed: h.metrics.handshakeFailures, logf: logf})
}

// handshakeTimeout is what net/http gives a TLS handshake: the least of
// its positive read-header, read and write timeouts; 10 s without any.
func handshakeTimeout(srv *http.Server) time.Duration {
	var d time.Duration
	for _, v := range []time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	if d == 0 {
		d = 10 * time.Second
	}
	return d
}
