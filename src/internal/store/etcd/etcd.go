package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures Open. The zero value starts an embedded server in a
// directory that must then be given as DataDir.
type Options struct {
	// Endpoints of an external etcd cluster; empty starts an embedded server.
	Endpoints []string
	// DataDir holds the embedded server's data (DataDir/etcd).
	DataDir string
	// ClientPort for the embedded server; 0 picks a free loopback port.
	ClientPort int
	// DialTimeout bounds the first connection; 0 means 10s.
	DialTimeout time.Duration
	// StartTimeout bounds the embedded server's start; 0 means 60s.
	StartTimeout time.Duration
	// CompactionRetention is how much history the embedded server keeps:
	// it compacts every retention period to the revision of one period
	// ago ("periodic" mode); 0 means DefaultCompactionRetention.
	CompactionRetention time.Duration
	// QuotaBytes is the embedded server's backend quota: past it etcd
	// raises its NOSPACE alarm and refuses writes (see Maintain); 0 means
	// DefaultQuotaBytes.
	QuotaBytes int64
	// Logger receives the store's own messages; nil discards them.
	Logger *logrus.Entry
}

// Store is an open etcd client and, in embedded mode, the server behind it.
type Store struct {
	Client   *clientv3.Client
	server   *embed.Etcd
	embedded []string
	peers    []string
	// logLevel gates the embedded server's logs; Close raises it so the
	// errors etcd logs about its own listeners closing stay out of the log.
	logLevel zap.AtomicLevel

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{} // closed when Close begins
	watched   chan struct{} // closed when the failure watch ends

	failMu  sync.Mutex
	failure error // set once the embedded server has failed

	// quota is the embedded server's backend quota (0 when external).
	quota int64
	// space is the last maintenance pass's verdict on the NOSPACE alarm.
	space spaceState
}

// ErrServerFailed marks an embedded server that stopped on its own: it
// logged a fatal error (a full disk, no file descriptors left) or stopped
// serving. The process keeps running and reports it through Ping, so
// /readyz answers 503 instead of the orchestrator exiting.
var ErrServerFailed = errors.New("embedded etcd failed")

// Open connects to etcd, starting an embedded server first when no endpoints
// are configured. It returns once the client can reach the server.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	st := &Store{logLevel: zap.NewAtomicLevelAt(zap.ErrorLevel), closing: make(chan struct{})}
	endpoints := opts.Endpoints
	if len(endpoints) == 0 {
		if opts.DataDir == "" {
			return nil, errors.New("etcd: no endpoints and no data dir for the embedded server")
		}
		// etcd ends the process on a fatal or panic log (zap's default); here
		// the goroutine that logged it ends instead and the store is marked
		// failed.
		zl := logging.Zap(opts.Logger, st.logLevel).WithOptions(
			zap.WithFatalHook(failHook{st}), zap.WithPanicHook(failHook{st}))
		srv, err := st.guard(func() (*embed.Etcd, error) { return startEmbedded(ctx, opts, zl) })
		if err != nil {
			return nil, err
		}
		st.server = srv
		st.quota = srv.Config().QuotaBackendBytes
		st.watched = make(chan struct{})
		go st.watch(opts.Logger)
		for _, u := range srv.Config().AdvertiseClientUrls {
			st.embedded = append(st.embedded, u.String())
		}
		for _, u := range srv.Config().ListenPeerUrls {
			st.peers = append(st.peers, u.String())
		}
		endpoints = st.embedded
		opts.Logger.WithField("endpoints", endpoints).Info("embedded etcd started")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: opts.DialTimeout,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		_ = st.Close() // the connect error is the one worth reporting
		return nil, fmt.Errorf("etcd: connect to %v: %w", endpoints, err)
	}
	st.Client = cli
	pingCtx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	if err := st.Ping(pingCtx); err != nil {
		_ = st.Close() // the ping error is the one worth reporting
		return nil, fmt.Errorf("etcd: reach %v: %w", endpoints, err)
	}
	return st, nil
}

// Endpoints returns the client URLs of the embedded server (nil when external).
func (s *Store) Endpoints() []string { return s.embedded }

// PeerEndpoints returns the peer URLs the embedded server listens on (nil
// when external): they reach this process as much as the client URLs do.
func (s *Store) PeerEndpoints() []string { return s.peers }

// Ping performs a linearizable read, as `etcdctl endpoint health` does. An
// embedded server that failed fails it at once, naming why.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.Failure(); err != nil {
		return err
	}
	_, err := s.Client.Get(ctx, "health")
	return err
}

// Failure returns why the embedded server failed (ErrServerFailed), or nil.
func (s *Store) Failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failure
}

func (s *Store) fail(err error) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failure == nil {
		s.failure = fmt.Errorf("%w: %w", ErrServerFailed, err)
	}
}

// guard runs start in a goroutine of its own: a fatal log there ends only
// that goroutine, and the failure it recorded is returned.
func (s *Store) guard(start func() (*embed.Etcd, error)) (*embed.Etcd, error) {
	var srv *embed.Etcd
	var err error
	done := make(chan struct{})
	returned := false
	go func() {
		defer close(done)
		srv, err = start()
		returned = true
	}()
	<-done
	if !returned {
		return nil, fmt.Errorf("embedded etcd: start: %w", s.Failure())
	}
	return srv, err
}

// watch reports what the embedded server says after it started: a serve
// error, or the server stopping before Close asked it to.
func (s *Store) watch(log *logrus.Entry) {
	defer close(s.watched)
	errc := s.server.Err()
	for {
		select {
		case <-s.closing:
			return
		case err, ok := <-errc:
			if !ok {
				errc = nil
				continue
			}
			if err != nil {
				s.fail(err)
				log.WithError(err).Error("embedded etcd failed; the orchestrator is not ready until restarted")
			}
		case <-s.server.Server.StopNotify():
			select {
			case <-s.closing:
			default:
				s.fail(errors.New("the server stopped"))
				log.Error("embedded etcd stopped; the orchestrator is not ready until restarted")
			}
			return
		}
	}
}

// failHook is the zap hook for etcd's fatal and panic logs: record the
// failure and end the goroutine that logged it, never the process.
type failHook struct{ s *Store }

func (h failHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	msg := ce.Message
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			msg += ": " + err.Error()
		}
	}
	h.s.fail(errors.New(msg))
	runtime.Goexit()
}

// Close closes the client and stops the embedded server, if any. Calling it
// again is a no-op that returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		if s.watched != nil {
			<-s.watched
		}
		if s.Client != nil {
			s.closeErr = s.Client.Close()
		}
		if s.server != nil {
			s.logLevel.SetLevel(zap.FatalLevel)
			s.server.Close()
			<-s.server.Server.StopNotify()
		}
	})
	return s.closeErr
}

func startEmbedded(ctx context.Context, opts Options, log *zap.Logger) (*embed.Etcd, error) {
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	retention := opts.CompactionRetention
	if retention <= 0 {
		retention = DefaultCompactionRetention
	}
	quota := opts.QuotaBytes
	if quota <= 0 {
		quota = DefaultQuotaBytes
	}
	// A port picked free can be taken before etcd binds it; try a few times.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		clientPort := opts.ClientPort
		if clientPort == 0 {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			clientPort = p
		}
		peerPort, err := freePort()
		if err != nil {
			return nil, err
		}
		cfg := embed.NewConfig()
		cfg.Name = "argus"
		cfg.Dir = filepath.Join(opts.DataDir, "etcd")
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(log)
		cu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
		pu := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = retention.String()
		cfg.QuotaBackendBytes = quota

		srv, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			if opts.ClientPort != 0 {
				break
			}
			continue
		}
		select {
		case <-srv.Server.ReadyNotify():
			return srv, nil
		case err := <-srv.Err():
			srv.Close()
			return nil, fmt.Errorf("embedded etcd: %w", err)
		case <-time.After(timeout):
			srv.Close()
			return nil, fmt.Errorf("embedded etcd: not ready after %s", timeout)
		case <-ctx.Done():
			srv.Close()
			return nil, fmt.Errorf("embedded etcd: %w", ctx.Err())
		}
	}
	return nil, fmt.Errorf("embedded etcd: start: %w", lastErr)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
