package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/fleet/frame"
)

// recheckFramed is how long the agent keeps to gRPC for an orchestrator
// that did not speak the framed stream, before it offers it again (the
// orchestrator may have been upgraded).
const recheckFramed = 10 * time.Minute

// open opens a stream to endpoint cur (e): on the stream's own framing
// (pb.FramedALPN) where the orchestrator speaks it, on gRPC otherwise; the
// returned function closes it. ctx's end ends the stream.
func (a *Agent) open(ctx context.Context, cur int, e endpoint, cred Credential) (pb.Fleet_ConnectClient, func(), error) {
	if a.tryFramed(cur, e) {
		s, closeStream, err := a.openFramed(ctx, e, cred)
		if !errors.Is(err, errNotFramed) {
			return s, closeStream, err
		}
		a.mu.Lock()
		a.grpcOnly[cur] = time.Now()
		a.mu.Unlock()
	}
	return a.openGRPC(ctx, e, cred)
}

// tryFramed reports whether to offer the framed stream to e: over TLS
// without a proxy (gRPC's dialer speaks $HTTPS_PROXY: behind one, an agent
// streams on argus-fleet/1), unless e did not speak it lately.
func (a *Agent) tryFramed(cur int, e endpoint) bool {
	if e.framed == nil {
		return false
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: e.hostport}}); err != nil || p != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	since, ok := a.grpcOnly[cur]
	return !ok || time.Since(since) > recheckFramed
}

// errNotFramed is an orchestrator that does not speak the framed stream.
var errNotFramed = errors.New("the orchestrator does not speak " + pb.FramedALPN)

// dialTimeout bounds a framed stream's TCP connect and TLS handshake.
const dialTimeout = 20 * time.Second

func (a *Agent) openFramed(ctx context.Context, e endpoint, cred Credential) (pb.Fleet_ConnectClient, func(), error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: e.framed}
	// The handshake offers pb.ALPN and h2 too, so a server that knows
	// neither protocol still answers (and is then dialed with gRPC).
	c, err := d.DialContext(dctx, "tcp", e.hostport)
	if err != nil {
		return nil, nil, err
	}
	if c.(*tls.Conn).ConnectionState().NegotiatedProtocol != pb.FramedALPN {
		_ = c.Close()
		return nil, nil, errNotFramed
	}
	fc := frame.NewConn(c, maxMessage)
	stop := context.AfterFunc(ctx, fc.Interrupt)
	closeStream := func() {
		stop()
		_ = fc.Close()
	}
	// The Welcome may wait for the hub's reads of the cluster's work,
	// slow while a fleet reconnects at once.
	s, err := frame.NewClientStream(ctx, fc, cred.Credential, welcomeWait)
	if err != nil {
		closeStream()
		return nil, nil, err
	}
	return s, closeStream, nil
}

// welcomeWait is how long a framed stream waits for the hub's Welcome.
const welcomeWait = 2 * time.Minute

// hubQuiet is how long a framed stream waits for the hub, which answers a
// heartbeat (every heartbeatSeconds) whenever it sent nothing for 25 s;
// past it the hub is taken for gone, as gRPC's keepalive would.
func hubQuiet(heartbeatSeconds int32) time.Duration {
	return max(time.Minute, 3*time.Duration(heartbeatSeconds)*time.Second)
}

func (a *Agent) openGRPC(ctx context.Context, e endpoint, cred Credential) (pb.Fleet_ConnectClient, func(), error) {
	cc, err := grpc.NewClient(e.target, e.transportCredentials(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		// Fixed windows: the default sizes them by pinging the hub after
		// each message (BDP estimation), which doubled an idle stream's
		// packets. 1 MiB takes a 4 MiB batch of manifests in four round
		// trips.
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20),
		grpc.WithUserAgent("argus-agent/"+a.opts.Version))
	if err != nil {
		return nil, nil, err
	}
	closeStream := func() { _ = cc.Close() }
	stream, err := pb.NewFleetClient(cc).Connect(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cred.Credential))
	if err != nil {
		closeStream()
		return nil, nil, err
	}
	return stream, closeStream, nil
}
