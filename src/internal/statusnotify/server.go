package statusnotify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/status"
)

// Status answers status queries as the REST API does (status.Reader).
type Status interface {
	DIG(ctx context.Context, dig catalog.Key, v url.Values) (any, error)
	Cluster(ctx context.Context, provider, name string, v url.Values) (any, error)
	LogicalCloud(ctx context.Context, key catalog.Key, v url.Values) (any, error)
}

// Changes tells of changes of a group's status (notify.Manager).
type Changes interface {
	// Listen registers f, which must not block, for the group's changes
	// and returns its removal.
	Listen(group string, f func()) func()
}

// TokenChecker says whether a bearer token may use the service.
type TokenChecker interface {
	Valid(token string) bool
}

// Options configures a Server; Status and Changes are required.
type Options struct {
	Status  Status
	Changes Changes
	// Tokens, when set, requires a valid bearer token on every call.
	Tokens TokenChecker
	// MaxStreams bounds the registrations open at once; 0 means 1024.
	MaxStreams int
	// RequestTimeout bounds how long a call may take to send its request
	// message after its headers; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// SendTimeout bounds each notification sent: a client that stops
	// reading loses its stream; 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// IdleTimeout closes a connection with no call in progress (a client
	// whose calls were all refused is one); 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	Logger      *logrus.Entry
}

// Defaults of the bounds on what a connection may hold without progress.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultSendTimeout    = 30 * time.Second
	DefaultIdleTimeout    = 30 * time.Second
)

// Limits on what a registration may carry: a client id is an identifier,
// filters are lists a person writes.
const (
	maxClientID = 256
	maxFilters  = status.MaxFilterValues
)

// Server implements the StatusNotify service.
type Server struct {
	pb.UnimplementedStatusNotifyServer
	opts Options
	log  *logrus.Entry

	mu      sync.Mutex
	clients map[string]context.CancelFunc // open registrations by client id
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Status == nil || opts.Changes == nil {
		return nil, errors.New("statusnotify: Status and Changes are required")
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = 1024
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = DefaultSendTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	return &Server{opts: opts, log: opts.Logger, clients: map[string]context.CancelFunc{}}, nil
}

// ServerOptions are the options a grpc.Server serving s needs. Whoever
// can reach the port holds a connection before any call is authenticated,
// so nothing waits on a client without a bound: the handshake, the token
// (checked on a call's headers, before its message is read), the request
// message, each notification sent, and a connection with no call.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.opts.IdleTimeout, Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.MaxConcurrentStreams(64),
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.InTapHandle(s.tap),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			guardOf(ctx).received() // a unary call's message is read before its handler runs
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, guardedStream{ServerStream: ss, guard: guardOf(ss.Context())})
		}),
	}
}

// tap runs on a call's headers, before any message of it is read: the
// token is checked there, and the call's context armed to end it should
// its request message not come within RequestTimeout.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.opts.Tokens != nil {
		token, err := s.authenticate(info.Header)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(token))
		ctx = context.WithValue(ctx, callerKey{}, hex.EncodeToString(sum[:]))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	g := &guard{cancel: cancel}
	g.timer = time.AfterFunc(s.opts.RequestTimeout, func() { cancel(errNoRequest) })
	context.AfterFunc(ctx, func() { g.timer.Stop() })
	return context.WithValue(ctx, guardKey{}, g), nil
}

var (
	errNoRequest = errors.New("no request message in time")
	errNoReader  = errors.New("the client did not read a notification in time")
)

// guard can end its call: when the request message does not come in time,
// or a notification cannot be sent in time.
type guard struct {
	timer  *time.Timer
	cancel context.CancelCauseFunc
}

type guardKey struct{}

// guardOf returns the call's guard; nil (which does nothing) for a call
// the tap did not see.
func guardOf(ctx context.Context) *guard {
	g, _ := ctx.Value(guardKey{}).(*guard)
	return g
}

// received disarms the request deadline.
func (g *guard) received() {
	if g != nil {
		g.timer.Stop()
	}
}

// send sends one message, ending the call if it cannot within d.
func (g *guard) send(d time.Duration, send func() error) error {
	if g == nil {
		return send()
	}
	t := time.AfterFunc(d, func() { g.cancel(errNoReader) })
	defer t.Stop()
	return send()
}

// guardedStream disarms the request deadline once a message came.
type guardedStream struct {
	grpc.ServerStream
	guard *guard
}

func (s guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	s.guard.received()
	return nil
}

// authenticate checks the call's "authorization: Bearer <token>" and
// returns the token.
func (s *Server) authenticate(md metadata.MD) (string, error) {
	for _, v := range md.Get("authorization") {
		scheme, token, _ := strings.Cut(strings.TrimSpace(v), " ")
		if strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(token) != "" && s.opts.Tokens.Valid(strings.TrimSpace(token)) {
			return strings.TrimSpace(token), nil
		}
	}
	return "", grpcstatus.Error(codes.Unauthenticated, `authentication required: send metadata "authorization: Bearer <token>"`)
}

type callerKey struct{}

// clientKey names a registration: its client id within its caller's
// token (a hash of it), so that no caller — a read-only token included —
// can end another's stream with StatusDeregister or hold its client id.
func clientKey(ctx context.Context, id string) string {
	caller, _ := ctx.Value(callerKey{}).(string)
	return caller + "\x00" + id
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterStatusNotifyServer(g, s) }

// subject is what a registration follows.
type subject struct {
	group string
	query func(ctx context.Context, v url.Values) (any, error)
	// clusters: details are per cluster (a cluster or a logical cloud),
	// not per app.
	clusters bool
	// readyWhenDeployed: READY follows the deployed status alone, as EMCO's
	// dcm says of a logical cloud.
	readyWhenDeployed bool
}

func (s *Server) subjectOf(reg *pb.StatusRegistration) (subject, error) {
	switch k := reg.GetKey().(type) {
	case *pb.StatusRegistration_DigKey:
		dig := catalog.Key{k.DigKey.GetProject(), k.DigKey.GetCompositeApp(), k.DigKey.GetCompositeAppVersion(), k.DigKey.GetDeploymentIntentGroup()}
		if err := validKey(dig); err != nil {
			return subject{}, err
		}
		return subject{group: catalog.DIGGroup(dig), query: func(ctx context.Context, v url.Values) (any, error) {
			return s.opts.Status.DIG(ctx, dig, v)
		}}, nil
	case *pb.StatusRegistration_ClusterKey:
		p, c := k.ClusterKey.GetClusterProvider(), k.ClusterKey.GetCluster()
		if err := validKey(catalog.Key{p, c}); err != nil {
			return subject{}, err
		}
		return subject{group: catalog.ClusterGroup(p, c), clusters: true, query: func(ctx context.Context, v url.Values) (any, error) {
			return s.opts.Status.Cluster(ctx, p, c, v)
		}}, nil
	case *pb.StatusRegistration_LcKey:
		lc := catalog.Key{k.LcKey.GetProject(), k.LcKey.GetLogicalCloud()}
		if err := validKey(lc); err != nil {
			return subject{}, err
		}
		return subject{group: catalog.LogicalCloudGroup(lc[0], lc[1]), clusters: true, readyWhenDeployed: true,
			query: func(ctx context.Context, v url.Values) (any, error) { return s.opts.Status.LogicalCloud(ctx, lc, v) }}, nil
	}
	return subject{}, grpcstatus.Error(codes.InvalidArgument, "the registration names no deployment intent group, cluster or logical cloud key")
}

func validKey(k catalog.Key) error {
	for _, part := range k {
		if err := catalog.ValidateName("key", part); err != nil {
			return grpcstatus.Error(codes.InvalidArgument, err.Error())
		}
	}
	return nil
}

// query is the status query of a registration.
func query(reg *pb.StatusRegistration) (url.Values, bool, error) {
	if len(reg.GetApps()) > maxFilters || len(reg.GetClusters()) > maxFilters || len(reg.GetResources()) > maxFilters {
		return nil, false, grpcstatus.Errorf(codes.InvalidArgument, "at most %d apps, clusters and resources may filter a registration", maxFilters)
	}
	v := url.Values{}
	ready := true
	switch reg.GetStatusType() {
	case pb.StatusValue_DEPLOYED, pb.StatusValue_NOT_DEPLOYED:
		ready = false
		v.Set("type", status.TypeRsync)
	default: // READY, as emcoctl asks unless told otherwise
		v.Set("type", status.TypeCluster)
	}
	v.Set("output", status.OutputSummary)
	if reg.GetOutput() == pb.OutputType_ALL {
		v.Set("output", status.OutputAll)
	}
	for name, list := range map[string][]string{"app": reg.GetApps(), "cluster": reg.GetClusters(), "resource": reg.GetResources()} {
		for _, f := range list {
			if f != "" {
				v.Add(name, f)
			}
		}
	}
	return v, ready, nil
}

// StatusRegister streams notifications of a subject's status until the
// client goes away or deregisters.
func (s *Server) StatusRegister(reg *pb.StatusRegistration, stream grpc.ServerStreamingServer[pb.StatusNotification]) error {
	id := reg.GetClientId()
	if id == "" || len(id) > maxClientID {
		return grpcstatus.Errorf(codes.InvalidArgument, "clientId must be 1 to %d characters", maxClientID)
	}
	subj, err := s.subjectOf(reg)
	if err != nil {
		return err
	}
	v, ready, err := query(reg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	key := clientKey(ctx, id)
	s.mu.Lock()
	switch {
	case s.clients[key] != nil:
		s.mu.Unlock()
		return grpcstatus.Errorf(codes.AlreadyExists, "client id %q is already registered", id)
	case len(s.clients) >= s.opts.MaxStreams:
		s.mu.Unlock()
		return grpcstatus.Errorf(codes.ResourceExhausted, "%d registrations are open; at most %d may be", len(s.clients), s.opts.MaxStreams)
	}
	s.clients[key] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, key)
		s.mu.Unlock()
	}()

	// Listening before the first query: a change in between is not lost.
	changed := make(chan struct{}, 1)
	stop := s.opts.Changes.Listen(subj.group, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer stop()
	log := s.log.WithFields(logrus.Fields{"client": id, "group": subj.group})
	log.Info("status notification registration")
	var last *pb.StatusNotification
	for {
		resp, err := subj.query(ctx, v)
		switch {
		case ctx.Err() != nil:
			return nil // deregistered, or the client went away
		case err != nil && last == nil:
			return grpcError(err) // the subject does not exist, a bad filter
		case err != nil:
			log.WithError(err).Warn("cannot compute the status; waiting for the next change")
		default:
			if r, ok := responseOf(resp); ok {
				n := notification(r, ready, reg.GetOutput() == pb.OutputType_ALL, subj)
				if last == nil || !proto.Equal(last, n) {
					if err := guardOf(stream.Context()).send(s.opts.SendTimeout, func() error { return stream.Send(n) }); err != nil {
						return err
					}
					last = n
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// responseOf is a status answer as a notification reads it: a logical
// cloud's clusters (status.CloudResponse) as those of its one pseudo-app.
func responseOf(v any) (status.Response, bool) {
	switch r := v.(type) {
	case status.Response:
		return r, true
	case status.CloudResponse:
		resp := r.Response
		if len(r.Clusters) > 0 {
			resp.Apps = []status.App{{Name: logicalcloud.App, Clusters: r.Clusters}}
		}
		return resp, true
	}
	return status.Response{}, false
}

// StatusDeregister ends a client's stream; an unknown client id is no
// error (it may have gone already), as in EMCO.
func (s *Server) StatusDeregister(ctx context.Context, d *pb.StatusDeregistration) (*pb.StatusDeregistrationResponse, error) {
	s.mu.Lock()
	cancel := s.clients[clientKey(ctx, d.GetClientId())]
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return &pb.StatusDeregistrationResponse{}, nil
}

// grpcError maps a domain error to a gRPC status (api.statusFor does the
// same for HTTP).
func grpcError(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrUnprocessable):
		code = codes.InvalidArgument
	case errors.Is(err, errdefs.ErrConflict):
		code = codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = codes.Unavailable
	case errors.Is(err, errdefs.ErrTooLarge):
		code = codes.ResourceExhausted
	case errors.Is(err, errdefs.ErrTimedOut):
		code = codes.DeadlineExceeded
	case errors.Is(err, errdefs.ErrUnauthorized):
		code = codes.Unauthenticated
	}
	if code == codes.Internal {
		return grpcstatus.Error(code, "internal error")
	}
	return grpcstatus.Error(code, err.Error())
}
