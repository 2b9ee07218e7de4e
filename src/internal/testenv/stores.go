package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/mongo"
	"go.uber.org/goleak"

	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
	"github.com/argus-mc/argus/src/internal/storeproc"
)

// Stores are the embedded etcd and FerretDB servers of one test package,
// run by a stores process built without the race detector (package
// storeproc), and the package's clients of them.
type Stores struct {
	Etcd  *etcdstore.Store
	Mongo *mongostore.Store
	Dir   string

	proc *storeproc.Process
}

// StoresBinaryEnv names the program whose "stores" subcommand serves the
// tests' stores: make test builds bin/simcluster and sets it. Unset, the
// tests build it (go build into the start's directory, each time: a plain
// `go test` of one package, where the build cache makes it a link).
const StoresBinaryEnv = "ARGUS_STORES_BINARY"

// StoresBinary returns the stores program, building it into dir when
// StoresBinaryEnv is unset. The build has a deadline of its own (a cold
// one on 2 cores, beside other packages' builds, takes minutes), not the
// caller's start-up one.
func StoresBinary(dir string) (string, error) {
	if bin := os.Getenv(StoresBinaryEnv); bin != "" {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "simcluster")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/argus-mc/argus/src/cmd/simcluster")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the stores program (or set %s): %v: %s", StoresBinaryEnv, err, out)
	}
	return bin, nil
}

// StartStores starts both embedded stores with their data under dir, in a
// process of their own, and connects to them.
func StartStores(ctx context.Context, dir string) (*Stores, error) {
	bin, err := StoresBinary(dir)
	if err != nil {
		return nil, err
	}
	proc, err := storeproc.Start(ctx, storeproc.Options{Binary: bin, Dir: dir, Mongo: true})
	if err != nil {
		return nil, err
	}
	s := &Stores{Dir: dir, proc: proc}
	if s.Etcd, err = etcdstore.Open(ctx, etcdstore.Options{Endpoints: proc.Info().Etcd}); err != nil {
		_ = proc.Stop() // the connect error is the one worth reporting
		return nil, err
	}
	if s.Mongo, err = mongostore.Open(ctx, mongostore.Options{URI: proc.Info().Mongo}); err != nil {
		_ = s.Etcd.Close()
		_ = proc.Stop()
		return nil, err
	}
	return s, nil
}

// Close disconnects and stops the stores.
func (s *Stores) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(s.Mongo.Close(ctx), s.Etcd.Close(), s.proc.Stop())
}

// StopServers stops the stores process, leaving the clients to fail: a
// test of what the orchestrator does when its stores go away.
func (s *Stores) StopServers() error { return s.proc.Stop() }

// EtcdEndpoints returns etcd's client URLs.
func (s *Stores) EtcdEndpoints() []string { return s.proc.Info().Etcd }

// MongoURI returns FerretDB's URI.
func (s *Stores) MongoURI() string { return s.proc.Info().Mongo }

// Database returns a fresh, uniquely named database dropped when t ends, so
// tests sharing the package's server never see each other's data.
func (s *Stores) Database(t testing.TB) *mongo.Database {
	t.Helper()
	db := s.Mongo.Client.Database(UniqueName("t"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
	})
	return db
}

// EtcdPrefix returns a unique key prefix for one test's etcd data.
func (s *Stores) EtcdPrefix() string { return "/" + UniqueName("t") + "/" }

// UniqueName returns prefix plus random hex, valid as a database or resource name.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Main runs a test package with fresh embedded stores, hands them to setup,
// removes everything afterwards, and fails the run if goroutines leaked.
func Main(m *testing.M, setup func(*Stores)) {
	os.Exit(run(m, func(s *Stores) error { setup(s); return nil }, nil))
}

// run starts the stores, calls setup, runs the tests, calls teardown, stops
// the stores, and checks for leaked goroutines.
func run(m *testing.M, setup func(*Stores) error, teardown func() error) int {
	dir, err := os.MkdirTemp("", "argus-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // temp data; the OS cleans up eventually
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	stores, err := StartStores(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv: start stores:", err)
		return 1
	}
	code := 0
	if err := setup(stores); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		code = 1
	} else {
		code = m.Run()
	}
	if teardown != nil {
		if err := teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			code = 1
		}
	}
	if err := stores.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stop stores:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: goroutines leaked:", err)
			return 1
		}
	}
	return code
}

// LeakOptions are the goroutine-leak check's exceptions: only goroutines that
// third-party libraries start once per process and never stop.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		// klog's flush daemon (via client-go) runs for the process lifetime.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}
