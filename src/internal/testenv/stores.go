package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/mongo"
	"go.uber.org/goleak"

	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
)

// Stores are the embedded etcd and FerretDB servers of one test package.
type Stores struct {
	Etcd  *etcdstore.Store
	Mongo *mongostore.Store
	Dir   string
}

// StartStores starts both embedded stores with their data under dir.
func StartStores(ctx context.Context, dir string) (*Stores, error) {
	e, err := etcdstore.Open(ctx, etcdstore.Options{DataDir: dir})
	if err != nil {
		return nil, err
	}
	m, err := mongostore.Open(ctx, mongostore.Options{DataDir: dir})
	if err != nil {
		_ = e.Close() // the FerretDB error is the one worth reporting
		return nil, err
	}
	return &Stores{Etcd: e, Mongo: m, Dir: dir}, nil
}

// Close stops both stores.
func (s *Stores) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(s.Mongo.Close(ctx), s.Etcd.Close())
}

// EtcdEndpoints returns the embedded etcd's client URLs.
func (s *Stores) EtcdEndpoints() []string { return s.Etcd.Endpoints() }

// MongoURI returns the embedded FerretDB's URI.
func (s *Stores) MongoURI() string { return s.Mongo.EmbeddedURI() }

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
