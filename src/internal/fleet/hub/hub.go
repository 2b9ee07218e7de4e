package hub

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Credentials says which pull cluster an agent's credential belongs to
// (join.Service).
type Credentials interface {
	// Authenticate returns the credential's cluster and the cluster's
	// status epoch; errdefs.ErrUnauthorized when it is unknown or revoked.
	Authenticate(credential string) (appcontext.ClusterRef, int64, error)
	Pulls(ref appcontext.ClusterRef) bool
	Clusters() []appcontext.ClusterRef
	// OnChange tells of clusters registered, re-joined (present) or
	// deleted; register before Run.
	OnChange(f func(ref appcontext.ClusterRef, present bool))
	// RecordKey is the etcd key of ref's registration: writes of a pull
	// cluster's state are guarded by it, so none outlives the cluster.
	RecordKey(ref appcontext.ClusterRef) string
}

// Claims decides which replica keeps each pull cluster's connectivity
// (ownership.Kind); the hub says which clusters exist and is called back
// through Acquired and Released.
type Claims interface {
	Want(item string)
	Drop(item string)
}

// Observed is the watch-fed view of the contexts (appcontext.Cache).
type Observed interface {
	WaitRevision(ctx context.Context, rev int64) error
}

// Options configures a Hub; Client, Contexts, Observed and Credentials
// are required.
type Options struct {
	Client      *clientv3.Client
	Contexts    *appcontext.Store
	Observed    Observed
	Credentials Credentials
	// Prefix of every key; "" means "/argus".
	Prefix string
	// Replica is this replica's id, recorded with the sessions it holds.
	Replica string
	// Claims shares the clusters' keepers among replicas; nil keeps all.
	Claims Claims
	// LeaseTTL is the TTL of the lease the session keys are on: how long
	// the sessions of a replica that died stay recorded; 0 means 10s.
	LeaseTTL time.Duration
	// UnreachableAfter is how long a pull cluster may have no stream
	// before it is Unreachable; 0 means 15s.
	UnreachableAfter time.Duration
	// SilentAfter is how long a connected agent may send nothing before
	// its monitor is Silent; 0 means 30s.
	SilentAfter time.Duration
	// Heartbeat is how often agents report when nothing changed; 0 means
	// DefaultHeartbeat (ReportInterval says what agents make of it).
	Heartbeat time.Duration
	// LastSeenInterval is how often a quiet connected cluster's last-seen
	// time is written; 0 means DefaultLastSeenInterval. The time is also
	// written when the stream ends and when the agent goes silent, so
	// this bounds how stale it is only after a replica dies.
	LastSeenInterval time.Duration
	// MaxAgents bounds the streams served at once; 0 means 20000.
	MaxAgents int
	// MaxStreamsPerCluster bounds the streams one cluster's credential
	// holds at once; 0 means DefaultMaxStreamsPerCluster.
	MaxStreamsPerCluster int
	// ConnectInterval and ConnectBurst bound how often one cluster's agent
	// may open a stream (a token bucket); 0 means DefaultConnectInterval
	// and DefaultConnectBurst.
	ConnectInterval time.Duration
	ConnectBurst    int
	// ReportBytesPerSecond and ReportBurst bound the etcd writes of one
	// cluster's reports (a token bucket; a report waits, and the agent's
	// next with it); 0 means DefaultReportBytesPerSecond and
	// DefaultReportBurst.
	ReportBytesPerSecond int
	ReportBurst          int
	// MaxQueuedBytes bounds the messages waiting to be sent to one agent;
	// 0 means DefaultMaxQueuedBytes.
	MaxQueuedBytes int
	// Now is the clock; nil means time.Now.
	Now        func() time.Time
	Logger     *logrus.Entry
	Registerer prometheus.Registerer

	// nativeOptions replace nativeServerOptions (tests measure them).
	nativeOptions []grpc.ServerOption
	// grpcOnly leaves pb.FramedALPN out of ListenTLS's protocols, as an
	// orchestrator that predates it (tests).
	grpcOnly bool
}

// Hub serves pull clusters' agents. Run starts its watches; Handler puts
// its gRPC service in front of an HTTP handler.
type Hub struct {
	pb.UnimplementedFleetServer
	opts    Options
	keys    keys
	log     *logrus.Entry
	srv     *grpc.Server // streams through Handler
	native  *native      // streams on gRPC's own transport (ListenTLS)
	framed  *framed      // streams on their own framing (ListenTLS)
	writer  *writer
	metrics *metrics
	blobs   *blobCache

	started chan struct{} // closed once the watches are up
	wg      sync.WaitGroup

	mu        sync.Mutex
	stopping  bool
	lease     *concurrency.Session
	sessions  map[appcontext.ClusterRef]*session
	streams   int
	quotas    map[appcontext.ClusterRef]*clusterQuota
	followers map[placementKey]map[uint64]chan progressRecordRev
	nextID    uint64
	keeper    keeper
}

// DefaultHeartbeat, DefaultSilentAfter and DefaultLastSeenInterval are
// Options' Heartbeat, SilentAfter and LastSeenInterval when not set. A
// connected cluster's liveness is its session and its silence verdict,
// both current; its last-seen time matters once it is gone, and is
// written then. The periodic write is a fallback for a replica that dies
// without writing it: at 10,000 clusters once a minute it was the
// largest share of an idle fleet's etcd writes and of every replica's
// watch traffic (Rancher Fleet's agents check in every 15 minutes).
const (
	DefaultHeartbeat        = 10 * time.Second
	DefaultSilentAfter      = appcontext.DefaultSilentAfter
	DefaultLastSeenInterval = 5 * time.Minute
)

// ReportInterval is how often an agent reports when nothing changed, for
// a hub whose Heartbeat is heartbeat: the Welcome carries whole seconds,
// and agents take at least one.
func ReportInterval(heartbeat time.Duration) time.Duration {
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	return max(time.Second, heartbeat.Truncate(time.Second))
}

// New returns a Hub.
func New(opts Options) (*Hub, error) {
	if opts.Client == nil || opts.Contexts == nil || opts.Observed == nil || opts.Credentials == nil {
		return nil, errors.New("hub: Client, Contexts, Observed and Credentials are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.LeaseTTL, 10*time.Second)
	def(&opts.UnreachableAfter, 15*time.Second)
	def(&opts.SilentAfter, DefaultSilentAfter)
	opts.Heartbeat = ReportInterval(opts.Heartbeat)
	def(&opts.LastSeenInterval, DefaultLastSeenInterval)
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	defInt(&opts.MaxAgents, 20000)
	defInt(&opts.MaxStreamsPerCluster, DefaultMaxStreamsPerCluster)
	def(&opts.ConnectInterval, DefaultConnectInterval)
	defInt(&opts.ConnectBurst, DefaultConnectBurst)
	defInt(&opts.ReportBytesPerSecond, DefaultReportBytesPerSecond)
	defInt(&opts.ReportBurst, DefaultReportBurst)
	defInt(&opts.MaxQueuedBytes, DefaultMaxQueuedBytes)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Hub{opts: opts, keys: newKeys(opts.Prefix), log: opts.Logger, metrics: m, started: make(chan struct{}),
		sessions: map[appcontext.ClusterRef]*session{}, quotas: map[appcontext.ClusterRef]*clusterQuota{}, followers: map[placementKey]map[uint64]chan progressRecordRev{}}
	h.keeper.init()
	h.writer = newWriter(opts.Client, m)
	h.blobs = newBlobCache(opts.Contexts)
	h.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	pb.RegisterFleetServer(h.srv, h)
	if opts.nativeOptions == nil {
		opts.nativeOptions = nativeServerOptions()
	}
	h.native = newNative(h, opts.nativeOptions...)
	h.framed = newFramed(h)
	opts.Credentials.OnChange(h.credentialsChanged)
	return h, nil
}

// maxMessage bounds one message either way: a bundle status is at most
// 1.5 MB, and larger reports and blob answers are split.
const maxMessage = 4 << 20

// Handler serves the fleet gRPC service on next's port: HTTP/2 requests
// for it go to the hub (their read and write deadlines lifted: a stream
// lasts as long as its agent), everything else to next.
func (h *Hub) Handler(next http.Handler) http.Handler {
	prefix := "/" + pb.Fleet_ServiceDesc.ServiceName + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || !strings.HasPrefix(r.URL.Path, prefix) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		h.srv.ServeHTTP(w, r)
	})
}

// Stop ends every agent's stream, on either transport (they reconnect, to
// this replica once it serves again or to another). Call it before the
// HTTP server's graceful shutdown, which would otherwise wait for the
// streams.
func (h *Hub) Stop() {
	h.srv.Stop()
	h.native.close()
	h.framed.close()
}

// Run follows the work records, the agents' progress and the session keys
// until ctx ends; then it ends every stream and waits for its goroutines.
func (h *Hub) Run(ctx context.Context) error {
	sess, err := h.newLease(ctx)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.lease = sess
	h.mu.Unlock()
	for _, ref := range h.opts.Credentials.Clusters() {
		h.want(ref)
	}
	watches := []struct {
		name, prefix string
		apply        func(etcdwatch.Event)
	}{
		{"fleet work", h.keys.workPrefix(), h.workEvent},
		{"fleet progress", h.keys.reportsPrefix(), h.progressEvent},
		{"fleet sessions", h.keys.sessionsPrefix(), h.sessionEvent},
	}
	var ready sync.WaitGroup
	for _, w := range watches {
		ready.Add(1)
		h.goOwned(func() { h.follow(ctx, w.name, w.prefix, w.apply, ready.Done) })
	}
	h.goOwned(func() { h.writer.run(ctx) })
	h.goOwned(func() { h.keepLease(ctx) })
	h.goOwned(func() { h.keep(ctx) })
	waitCtx(ctx, &ready)
	close(h.started)
	h.log.Info("fleet hub running")
	<-ctx.Done()
	h.mu.Lock()
	h.stopping = true // no stream handler starts from now on
	h.mu.Unlock()
	h.Stop()
	h.wg.Wait()
	h.mu.Lock()
	if h.lease != nil {
		_ = h.lease.Close()
	}
	h.mu.Unlock()
	return nil
}

// Started is closed once the hub follows its records: streams are
// accepted from then on.
func (h *Hub) Started() <-chan struct{} { return h.started }

// waitCtx waits for wg, or for ctx to end.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (h *Hub) goOwned(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

// newLease opens the lease the session keys live on.
func (h *Hub) newLease(ctx context.Context) (*concurrency.Session, error) {
	retry := backoff.Backoff{Base: time.Second, Step: time.Second, Max: 10 * time.Second}
	for {
		sess, err := concurrency.NewSession(h.opts.Client, concurrency.WithTTL(int(h.opts.LeaseTTL/time.Second)), concurrency.WithContext(ctx))
		if err == nil {
			return sess, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		h.log.WithError(err).Warn("cannot open the sessions' lease; retrying")
		if !retry.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
}

// keepLease replaces a lost lease and records every live session on the
// new one (their guards compare values, which do not change).
func (h *Hub) keepLease(ctx context.Context) {
	for {
		h.mu.Lock()
		sess := h.lease
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
		}
		h.log.Warn("the sessions' lease was lost; recording the live sessions on a new one")
		next, err := h.newLease(ctx)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.lease = next
		live := make([]*session, 0, len(h.sessions))
		for _, s := range h.sessions {
			live = append(live, s)
		}
		h.mu.Unlock()
		for _, s := range live {
			if err := s.rerecordSession(ctx, next.Lease()); err != nil {
				s.end(err) // the agent reconnects and records itself anew
			}
		}
	}
}

func (h *Hub) leaseID() clientv3.LeaseID {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lease == nil {
		return clientv3.NoLease
	}
	return h.lease.Lease()
}

// credentialsChanged ends the streams of a cluster deleted or joined anew
// (its credential replaced), and keeps the set of keepers current.
func (h *Hub) credentialsChanged(ref appcontext.ClusterRef, present bool) {
	if present {
		h.want(ref)
	} else {
		h.drop(ref)
		h.forgetQuota(ref)
		// A cluster registered again under the name counts its time
		// without a stream from its own registration.
		h.keeper.mu.Lock()
		delete(h.keeper.since, ref)
		h.keeper.mu.Unlock()
	}
	h.mu.Lock()
	s := h.sessions[ref]
	h.mu.Unlock()
	if s != nil && !s.stillAuthentic() {
		s.end(status.Error(codes.Unauthenticated, "the cluster's agent credential was revoked or replaced"))
	}
}

// Pulls reports whether ref is a pull cluster (rsync.Delegate).
func (h *Hub) Pulls(ref appcontext.ClusterRef) bool { return h.opts.Credentials.Pulls(ref) }
