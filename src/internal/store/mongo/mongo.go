package mongo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/sirupsen/logrus"
	"go.mongodb.org/mongo-driver/event"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/readpref"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures Open.
type Options struct {
	// URI of a MongoDB deployment; empty starts an embedded FerretDB.
	URI string
	// Database name; empty means "argus".
	Database string
	// DataDir holds the embedded server's SQLite files (DataDir/ferretdb).
	DataDir string
	// ConnectTimeout bounds the first connection; 0 means 10s.
	ConnectTimeout time.Duration
	// HeartbeatTimeout bounds each check that the server answers (every
	// HeartbeatInterval) and each new connection; 0 means 1.5s. A server
	// that misses HeartbeatMisses checks in a row is down: the operations
	// in flight on it are cut off, new ones wait at most
	// ServerSelectionTimeout for it (0 means 2s), and Available says why.
	HeartbeatTimeout, HeartbeatInterval, ServerSelectionTimeout time.Duration
	// HeartbeatMisses is how many checks in a row a server misses before
	// it is down; 0 means 1, so a create answers 503 within 2 s of the
	// store stopping (issue 27). The driver checks again at once after a
	// missed one, so 2 takes one stall longer than a check (embedded
	// FerretDB starved for a moment on a loaded machine) as a delay, at
	// the price of a hung server found down about two timeouts (3.5 s)
	// after it stopped.
	HeartbeatMisses int
	// Logger receives the store's messages (FerretDB's at error level only).
	Logger *logrus.Entry
}

// Store is an open client, its database, and in embedded mode the server.
type Store struct {
	Client *mongo.Client
	DB     *mongo.Database

	stopServer context.CancelFunc
	serverDone sync.WaitGroup
	embedded   string

	closeOnce sync.Once
	closeErr  error

	// down is why the server missed its last heartbeat, once it missed
	// misses of them in a row; nil while it answers.
	down atomic.Pointer[error]
	// missed counts the heartbeats missed in a row; misses is
	// Options.HeartbeatMisses.
	missed atomic.Int32
	misses int32

	// guards are the contexts Guard gave out, cancelled when the server
	// misses a heartbeat.
	guardMu sync.Mutex
	guards  map[*int]context.CancelCauseFunc
}

// Open connects to MongoDB, starting an embedded FerretDB first when no URI
// is configured. It returns once the server answers a ping.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Database == "" {
		opts.Database = "argus"
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.HeartbeatTimeout == 0 {
		// A write meets a server that stopped answering within an
		// interval and HeartbeatMisses of these (see Guard): with one, a
		// create answers 503 within 2 s.
		opts.HeartbeatTimeout = 1500 * time.Millisecond
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 500 * time.Millisecond // the driver's least
	}
	if opts.ServerSelectionTimeout == 0 {
		opts.ServerSelectionTimeout = 2 * time.Second
	}
	st := &Store{misses: int32(opts.HeartbeatMisses)}
	uri := opts.URI
	if uri == "" {
		if opts.DataDir == "" {
			return nil, errors.New("mongo: no URI and no data dir for the embedded server")
		}
		var err error
		if uri, err = st.startEmbedded(opts); err != nil {
			return nil, err
		}
		st.embedded = uri
		opts.Logger.WithField("uri", uri).Info("embedded FerretDB started")
	}
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	client, err := mongo.Connect(cctx, options.Client().ApplyURI(uri).SetTimeout(30*time.Second).
		SetConnectTimeout(opts.HeartbeatTimeout).SetHeartbeatInterval(opts.HeartbeatInterval).
		SetServerSelectionTimeout(opts.ServerSelectionTimeout).SetServerMonitor(st.monitor(opts.Logger)))
	if err != nil {
		_ = st.Close(ctx) // the connect error is the one worth reporting
		return nil, fmt.Errorf("mongo: connect: %w", err)
	}
	st.Client = client
	st.DB = client.Database(opts.Database)
	if err := st.Ping(cctx); err != nil {
		_ = st.Close(ctx) // the ping error is the one worth reporting
		return nil, fmt.Errorf("mongo: reach server: %w", err)
	}
	return st, nil
}

// monitor follows the server's heartbeats: Available reports the last.
func (s *Store) monitor(log *logrus.Entry) *event.ServerMonitor {
	return &event.ServerMonitor{
		ServerHeartbeatSucceeded: func(*event.ServerHeartbeatSucceededEvent) {
			s.missed.Store(0)
			if s.down.Swap(nil) != nil {
				log.Info("MongoDB answers again")
			}
		},
		ServerHeartbeatFailed: func(e *event.ServerHeartbeatFailedEvent) {
			err := e.Failure
			if n := s.missed.Add(1); n < s.missesToDown() {
				log.WithError(err).WithField("missed", n).Info("MongoDB missed a heartbeat; writes go on until it misses more in a row")
				return
			}
			if s.down.Swap(&err) == nil {
				log.WithError(err).Warn("MongoDB does not answer: changes are refused until it does")
			}
			s.cutGuards(s.Available())
		},
	}
}

// missesToDown is HeartbeatMisses with its default.
func (s *Store) missesToDown() int32 {
	if s.misses <= 0 {
		return 1
	}
	return s.misses
}

// Available returns nil while the server answers its heartbeats, and
// otherwise why it does not (an unavailable errdefs error): what needs
// MongoDB fails fast instead of waiting for it.
func (s *Store) Available() error {
	if p := s.down.Load(); p != nil {
		return errdefs.Unavailable(*p, "MongoDB does not answer")
	}
	return nil
}

// Guard returns a context derived from ctx that ends, with Available's
// error as its cause, as soon as the server is down (HeartbeatMisses
// heartbeats missed in a row; at once if it is down already): an
// operation under it fails then, not at its own timeout. One missed
// heartbeat only delays it, as it delays the driver, which takes the
// server for unknown but retries the check before it clears the pool.
// cancel releases it.
func (s *Store) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancelCause(ctx)
	if err := s.Available(); err != nil {
		cancel(err)
		return gctx, func() {}
	}
	id := new(int)
	s.guardMu.Lock()
	if s.guards == nil {
		s.guards = map[*int]context.CancelCauseFunc{}
	}
	s.guards[id] = cancel
	s.guardMu.Unlock()
	// Down between the check and the registration: cutGuards may have
	// run before this one was there.
	if err := s.Available(); err != nil {
		cancel(err)
	}
	return gctx, func() {
		s.guardMu.Lock()
		delete(s.guards, id)
		s.guardMu.Unlock()
		cancel(context.Canceled)
	}
}

// cutGuards ends every context Guard gave out, with cause.
func (s *Store) cutGuards(cause error) {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	for id, cancel := range s.guards {
		cancel(cause)
		delete(s.guards, id)
	}
}

// EmbeddedURI returns the embedded server's URI ("" when external).
func (s *Store) EmbeddedURI() string { return s.embedded }

// Ping checks that the primary answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.Client.Ping(ctx, readpref.Primary())
}

// Close disconnects and stops the embedded server, waiting for it to exit.
// Calling it again is a no-op that returns the first result.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		if s.Client != nil {
			s.closeErr = s.Client.Disconnect(ctx)
		}
		if s.stopServer != nil {
			s.stopServer()
			s.serverDone.Wait()
		}
	})
	return s.closeErr
}

func (s *Store) startEmbedded(opts Options) (string, error) {
	dir := filepath.Join(opts.DataDir, "ferretdb")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("mongo: create data dir: %w", err)
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
		Logger:    logging.Slog(opts.Logger.WithField("component", "ferretdb"), slog.LevelError),
	})
	if err != nil {
		return "", fmt.Errorf("mongo: start embedded FerretDB: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopServer = cancel
	s.serverDone.Add(1)
	go func() {
		defer s.serverDone.Done()
		// Run returns nil once ctx is cancelled. Anything else stops the
		// server for good: say so; Ping (and /readyz) fail from then on,
		// and the process keeps running.
		if err := f.Run(ctx); err != nil && ctx.Err() == nil {
			opts.Logger.WithError(err).Error("embedded FerretDB stopped; the orchestrator is not ready until restarted")
		}
	}()
	return f.MongoDBURI(), nil
}
