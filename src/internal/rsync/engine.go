package rsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

const fieldManager = syncstate.FieldManager

// Clusters gives rsync a client per cluster, and per cluster and logical
// cloud for contexts deployed in one.
type Clusters interface {
	Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error)
	CloudClient(ctx context.Context, ref appcontext.ClusterRef, cloud cluster.Cloud) (*cluster.Client, error)
}

// Field validation modes (see appcontext.Meta.FieldValidation).
const (
	FieldValidationStrict = appcontext.FieldValidationStrict
	FieldValidationWarn   = appcontext.FieldValidationWarn
	FieldValidationIgnore = appcontext.FieldValidationIgnore
)

// Options configures the Engine. Zero values are the documented defaults,
// except Store and Clusters, which are required.
type Options struct {
	Store    *appcontext.Store
	Clusters Clusters
	// Manifests loads each manifest when its resource is applied or
	// deleted (an action holds none of them meanwhile); nil makes one of
	// the default size over Store.
	Manifests *appcontext.Manifests
	// ClusterParallelism bounds the requests rsync has in flight to one
	// cluster, over every action; 0 means 16.
	ClusterParallelism int
	// BackoffBase and BackoffMax bound the retry delay of transient errors
	// (an unreachable or overloaded cluster); 0 means 500ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// WaitBase and WaitMax bound how often a Waiting resource is tried
	// again when no change of its cluster's API woke it first (a watch the
	// credentials forbid, a change the watches do not see); 0 means 1s
	// and 30s.
	WaitBase, WaitMax time.Duration
	// RequestTimeout bounds each request to a cluster, so one that does not
	// answer is retried like one that refuses; 0 means 15s.
	RequestTimeout time.Duration
	// FieldValidation is the default mode for contexts that name none;
	// "" means Warn.
	FieldValidation string
	// HookTimeout bounds each Helm hook's run (applied and succeeded), as
	// Helm's --timeout does; 0 means 5m.
	HookTimeout time.Duration
	// Observed is the watch-fed view of the contexts (the orchestrator's
	// appcontext.Cache): apps that depend on others wait for what it
	// reports. nil leaves dependencies unordered (unit tests).
	Observed Observed
	Logger   *logrus.Entry
}

// Engine runs rsync actions. It owns every goroutine it starts; Close stops
// them and waits.
//
// The engine runs the actions its Dispatcher starts (apply, update,
// delete of a context, one chain per group); everything an action needs
// is in the context, so deciding which process runs a context's action
// happens outside, in the Dispatcher.
type Engine struct {
	opts   Options
	log    *logrus.Entry
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	groups   map[string]*run // the last action started per group
	clusters map[appcontext.ClusterRef]*clusterState
	// waiters are told of changes of a group (dependency waits).
	waiters    map[string]map[uint64]chan struct{}
	nextWaiter uint64
	// transient times the retries of transient errors; waiting the
	// re-checks of Waiting resources (each run counts its own attempts).
	transient, waiting backoff.Backoff
}

// run is one action on one group. Runs on a group form a chain: each
// starts when the one before settled.
type run struct {
	kind, id string
	cancel   context.CancelFunc
	done     chan struct{} // this action stopped working
	quiet    chan struct{} // it tried everything once and only waits now (or is done)
	settled  chan struct{} // done, and every earlier action on the group settled
	prev     *run          // nil once settled
}

// New returns an Engine.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil || opts.Clusters == nil {
		return nil, errors.New("rsync: Store and Clusters are required")
	}
	if !appcontext.ValidFieldValidation(opts.FieldValidation) {
		return nil, fmt.Errorf("rsync: field validation %q is not one of Strict, Warn, Ignore", opts.FieldValidation)
	}
	if opts.FieldValidation == "" {
		opts.FieldValidation = FieldValidationWarn
	}
	if opts.Manifests == nil {
		opts.Manifests = appcontext.NewManifests(opts.Store, 0)
	}
	if opts.ClusterParallelism == 0 {
		opts.ClusterParallelism = 16
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.WaitBase == 0 {
		opts.WaitBase = time.Second
	}
	if opts.WaitMax == 0 {
		opts.WaitMax = 30 * time.Second
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 15 * time.Second
	}
	if opts.HookTimeout == 0 {
		opts.HookTimeout = hookTimeoutDefault
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, groups: map[string]*run{},
		clusters: map[appcontext.ClusterRef]*clusterState{}, waiters: map[string]map[uint64]chan struct{}{},
		transient: backoff.Backoff{Base: opts.BackoffBase, Max: opts.BackoffMax, Jitter: 0.2},
		waiting:   backoff.Backoff{Base: opts.WaitBase, Max: opts.WaitMax, Jitter: 0.2}}
	if opts.Observed != nil {
		opts.Observed.OnChange(e.changed)
	}
	return e, nil
}

// Close cancels every action and waits for them. Their progress is in etcd,
// where the group's next owner continues it.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
}

// Action kinds.
const (
	actionApply  = "apply"
	actionUpdate = "update"
	actionDelete = "delete"
)

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// cancelChainLocked cancels r and every unsettled run before it that
// works on context id or is not a deletion: a deletion of an earlier
// context goes on, since the new one's objects must not meet the old.
func (e *Engine) cancelChainLocked(r *run, id string) {
	for ; r != nil; r = r.prev {
		if r.kind != actionDelete || r.id == id {
			r.cancel()
		}
	}
}

// start queues an action on the group and returns its run. Starting what
// already runs (the same kind on the same context) returns the run in
// flight, so a group's records may be handed over again.
func (e *Engine) start(group, kind, id string, preempt bool) *run {
	e.mu.Lock()
	prev := e.groups[group]
	if prev != nil && !preempt && prev.kind == kind && prev.id == id && !closed(prev.done) {
		e.mu.Unlock()
		return prev
	}
	if preempt && prev != nil {
		e.cancelChainLocked(prev, id)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r := &run{kind: kind, id: id, cancel: cancel, done: make(chan struct{}), quiet: make(chan struct{}), settled: make(chan struct{}), prev: prev}
	quiet := sync.OnceFunc(func() { close(r.quiet) })
	e.groups[group] = r
	e.mu.Unlock()

	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			if prev != nil {
				<-prev.settled // settle in order, even when cancelled early
			}
			e.mu.Lock()
			r.prev = nil
			e.mu.Unlock()
			close(r.settled)
		}()
		defer close(r.done)
		defer quiet()
		defer cancel()
		if prev != nil {
			select { // actions on one group are serialised
			case <-prev.settled:
			case <-ctx.Done():
				return
			}
		}
		log := e.log.WithFields(logrus.Fields{"context": id, "action": kind, "group": group})
		start := time.Now()
		var err error
		switch kind {
		case actionApply, actionUpdate:
			err = e.apply(ctx, id, kind == actionUpdate, log, quiet)
		case actionDelete:
			err = e.delete(ctx, id, log)
		case actionSync:
			err = e.heal(ctx, id, log, quiet)
		}
		log = log.WithField("ms", time.Since(start).Milliseconds())
		switch {
		case err == nil:
			log.Info("rsync action finished")
		case errors.Is(err, context.Canceled):
			log.Info("rsync action cancelled")
		default:
			log.WithError(err).Warn("rsync action failed")
		}
	}()
	return r
}

// sleep waits the transient backoff for attempt; false if ctx ended first.
func (e *Engine) sleep(ctx context.Context, attempt int) bool {
	return backoff.Sleep(ctx, e.transient.Delay(attempt))
}

func ptrTrue() *bool { b := true; return &b }
