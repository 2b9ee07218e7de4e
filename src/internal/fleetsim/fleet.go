package fleetsim

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/fleet/agent"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures a Fleet; Orchestrators and Tokens are required.
type Options struct {
	// Orchestrators are the URLs every agent dials (the agent picks one
	// at random, and another after a failure).
	Orchestrators []string
	// Tokens are the clusters' join tokens by name (Register's answer).
	Tokens map[string]string
	// Churn is the status changes each cluster makes per minute while
	// it holds resources; 0 makes none (SetChurn changes it).
	Churn float64
	// Seed makes the churn's and the flaps' choices repeatable.
	Seed uint64
	// FlapEvery, when set, disconnects FlapFraction of the clusters
	// (picked at random; 0.1 when 0) every FlapEvery and reconnects them
	// half a period later, as links that drop.
	FlapEvery    time.Duration
	FlapFraction float64
	// RootCAs verify https orchestrators (agent.Options.RootCAs); nil
	// means the system's.
	RootCAs *x509.CertPool
	// BackoffBase and BackoffMax bound each agent's reconnect wait (the
	// agent's defaults when 0).
	BackoffBase, BackoffMax time.Duration
	Logger                  *logrus.Entry
}

// Change is one status change the simulator made: a resource's readiness.
type Change struct {
	Cluster, App string
	// Resource is the resource's appcontext key (Kind/namespace/name).
	Resource string
	Ready    bool
	At       time.Time
}

// Fleet is a set of simulated pull clusters.
type Fleet struct {
	opts     Options
	log      *logrus.Entry
	clusters []*simCluster
	byName   map[string]*simCluster
	churn    atomic.Uint64 // math.Float64bits of changes per cluster per minute

	mu      sync.Mutex
	changes []Change
	failed  []error
	flaps   int
}

// simCluster is one cluster: its agent, its in-memory Kubernetes side and
// the control of its agent's run.
type simCluster struct {
	name  string
	kube  *memCluster
	agent *agent.Agent

	mu      sync.Mutex
	up      chan struct{} // a reconnect asks the runner to start the agent
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the current run ended
}

// New builds the agents (nothing dials before Run).
func New(opts Options) (*Fleet, error) {
	if len(opts.Orchestrators) == 0 || len(opts.Tokens) == 0 {
		return nil, errors.New("fleetsim: Orchestrators and Tokens are required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	f := &Fleet{opts: opts, log: opts.Logger, byName: map[string]*simCluster{}}
	f.SetChurn(opts.Churn)
	names := make([]string, 0, len(opts.Tokens))
	for n := range opts.Tokens {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := &simCluster{name: n, kube: newMemCluster(n), up: make(chan struct{}, 1)}
		a, err := agent.New(agent.Options{Orchestrators: opts.Orchestrators, JoinToken: opts.Tokens[n], Cluster: c.kube,
			Credentials: &memCredentials{}, RootCAs: opts.RootCAs, BackoffBase: opts.BackoffBase, BackoffMax: opts.BackoffMax,
			Version: "fleetsim", Logger: opts.Logger.WithField("cluster", n)})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", n, err)
		}
		c.agent = a
		c.up <- struct{}{}
		f.clusters = append(f.clusters, c)
		f.byName[n] = c
	}
	return f, nil
}

// Run runs every agent and the churn until ctx ends, and returns once all
// of them stopped.
func (f *Fleet) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, c := range f.clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.runCluster(ctx, c)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.runChurn(ctx)
	}()
	if f.opts.FlapEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.runFlaps(ctx)
		}()
	}
	wg.Wait()
	return nil
}

// runCluster runs the cluster's agent whenever it is to be up.
func (f *Fleet) runCluster(ctx context.Context, c *simCluster) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.up:
		}
		rctx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		c.mu.Lock()
		c.cancel, c.stopped = cancel, stopped
		c.mu.Unlock()
		err := c.agent.Run(rctx)
		cancel()
		close(stopped)
		if err != nil && ctx.Err() == nil {
			f.mu.Lock()
			f.failed = append(f.failed, fmt.Errorf("cluster %s: %w", c.name, err))
			f.mu.Unlock()
			f.log.WithError(err).WithField("cluster", c.name).Warn("agent stopped")
		}
	}
}

// Clusters are the clusters' names, sorted.
func (f *Fleet) Clusters() []string {
	names := make([]string, len(f.clusters))
	for i, c := range f.clusters {
		names[i] = c.name
	}
	return names
}

// Connected counts the agents with a stream up.
func (f *Fleet) Connected() int {
	n := 0
	for _, c := range f.clusters {
		if c.agent.Connected() {
			n++
		}
	}
	return n
}

// Disconnect stops the named clusters' agents (their streams end, their
// state is kept) and returns once they stopped.
func (f *Fleet) Disconnect(names ...string) {
	for _, n := range names {
		c := f.byName[n]
		if c == nil {
			continue
		}
		c.mu.Lock()
		cancel, stopped := c.cancel, c.stopped
		c.cancel = nil
		c.mu.Unlock()
		if cancel != nil {
			cancel()
			<-stopped
		}
	}
}

// Reconnect starts the named clusters' agents again.
func (f *Fleet) Reconnect(names ...string) {
	for _, n := range names {
		if c := f.byName[n]; c != nil {
			select {
			case c.up <- struct{}{}:
			default: // already asked
			}
		}
	}
}

// SetChurn sets the status changes per cluster per minute.
func (f *Fleet) SetChurn(perClusterPerMinute float64) {
	f.churn.Store(math.Float64bits(max(0, perClusterPerMinute)))
}

// Changes returns every change made so far, in order.
func (f *Fleet) Changes() []Change {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Change(nil), f.changes...)
}

// Errors are the agents that stopped on their own (a refused join).
func (f *Fleet) Errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.failed...)
}

// runChurn makes the fleet's changes at the churn rate until ctx ends:
// clusters in turn (from a random start), each cluster's resources in
// turn, so a resource changes again only after every other resource of
// its cluster did (two changes close together could be coalesced, as a
// real monitor coalesces them, and would then look lost).
func (f *Fleet) runChurn(ctx context.Context) {
	rng := rand.New(rand.NewPCG(f.opts.Seed, f.opts.Seed^0x9e3779b97f4a7c15))
	next := rng.IntN(len(f.clusters))
	turns := make([]int, len(f.clusters))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	owed := 0.0
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			rate := math.Float64frombits(f.churn.Load()) * float64(len(f.clusters)) / 60 // per second
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				// A cluster holding nothing, or disconnected, is passed over.
				for range len(f.clusters) {
					i := next
					next = (next + 1) % len(f.clusters)
					ch, ok := f.clusters[i].kube.flip(turns[i])
					if !ok {
						continue
					}
					turns[i]++
					f.mu.Lock()
					f.changes = append(f.changes, ch)
					f.mu.Unlock()
					break
				}
			}
		}
	}
}

// runFlaps disconnects a fraction of the clusters every FlapEvery and
// reconnects them half a period later, until ctx ends.
func (f *Fleet) runFlaps(ctx context.Context) {
	rng := rand.New(rand.NewPCG(f.opts.Seed+1, f.opts.Seed))
	frac := f.opts.FlapFraction
	if frac <= 0 {
		frac = 0.1
	}
	count := max(1, int(math.Round(frac*float64(len(f.clusters)))))
	period := time.NewTicker(f.opts.FlapEvery)
	defer period.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-period.C:
		}
		names := make([]string, 0, count)
		for _, i := range rng.Perm(len(f.clusters))[:min(count, len(f.clusters))] {
			names = append(names, f.clusters[i].name)
		}
		f.Disconnect(names...)
		f.mu.Lock()
		f.flaps += len(names)
		f.mu.Unlock()
		back := time.NewTimer(f.opts.FlapEvery / 2)
		select {
		case <-ctx.Done():
			back.Stop()
			return
		case <-back.C:
		}
		f.Reconnect(names...)
	}
}

// Flaps counts the disconnections FlapEvery made.
func (f *Fleet) Flaps() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flaps
}

// memCredentials keeps an agent's credential in memory.
type memCredentials struct {
	mu sync.Mutex
	c  *agent.Credential
}

func (m *memCredentials) Load(context.Context) (*agent.Credential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c == nil {
		return nil, nil
	}
	c := *m.c
	return &c, nil
}

func (m *memCredentials) Save(_ context.Context, c agent.Credential) error {
	m.mu.Lock()
	m.c = &c
	m.mu.Unlock()
	return nil
}
