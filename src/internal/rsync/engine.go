package rsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/ownership"
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

// Contexts is where the engine reads contexts and records their
// statuses: the orchestrator's appcontext.Store, or a fleet agent's copy
// of its cluster's work.
type Contexts interface {
	Get(ctx context.Context, id string) (*appcontext.Context, error)
	List(ctx context.Context) ([]appcontext.Summary, error)
	// guards fence a write to the replica that owns the group (see
	// fencing); a store with no etcd behind it has nothing to fence.
	SetStatus(ctx context.Context, id string, st appcontext.Status, guards ...clientv3.Cmp) error
	SetResourceStatuses(ctx context.Context, id string, updates []appcontext.StatusUpdate, ctxStatus *appcontext.Status, guards ...clientv3.Cmp) error
}

var _ Contexts = (*appcontext.Store)(nil)

// Options configures the Engine. Zero values are the documented defaults,
// except Clusters and one of Store and Contexts, which are required.
type Options struct {
	// Store holds the contexts in etcd; the Dispatcher needs it.
	Store *appcontext.Store
	// Contexts, when set, is read and written instead of Store (a fleet
	// agent's local copy of its work).
	Contexts Contexts
	Clusters Clusters
	// Delegate, when set, hands the placements on pull clusters to their
	// agents instead of applying them (the fleet hub); it needs Observed.
	Delegate Delegate
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
	store  Contexts
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
	err      error         // why it stopped; set before done is closed
}

// New returns an Engine.
func New(opts Options) (*Engine, error) {
	if (opts.Store == nil && opts.Contexts == nil) || opts.Clusters == nil {
		return nil, errors.New("rsync: Store (or Contexts) and Clusters are required")
	}
	if opts.Delegate != nil && opts.Observed == nil {
		return nil, errors.New("rsync: a Delegate needs Observed, to follow what the agents report")
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
	store := opts.Contexts
	if store == nil {
		store = opts.Store
	}
	e := &Engine{opts: opts, store: store, log: opts.Logger, ctx: ctx, cancel: cancel, groups: map[string]*run{},
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

// start queues an action on the group and returns its run; its writes are
// fenced by fence (see fencing). Starting what already runs (the same kind
// on the same context) returns the run in flight, so a group's records may
// be handed over again.
func (e *Engine) start(group, kind, id string, preempt bool, fence ownership.Fence) *run {
	e.mu.Lock()
	prev := e.groups[group]
	if prev != nil && !preempt && prev.kind == kind && prev.id == id && !closed(prev.done) {
		e.mu.Unlock()
		return prev
	}
	if preempt && prev != nil {
		e.cancelChainLocked(prev, id)
	}
	ctx, stop := context.WithCancelCause(e.ctx)
	cancel := func() { stop(context.Canceled) }
	ctx = withFencing(ctx, fencing{fence: fence, stop: stop})
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
		if cause := context.Cause(ctx); fenced(cause) {
			err = cause
		}
		r.err = err
		switch {
		case err == nil:
			log.Info("rsync action finished")
		case fenced(err):
			log.WithError(err).Warn("rsync action stopped: this replica may no longer write for the group; its next owner continues it")
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

// load reads a context for an action: from etcd without its manifests
// (Manifests loads each when it is needed), or whole from an agent's own
// copy, which keeps them.
func (e *Engine) load(ctx context.Context, id string) (*appcontext.Context, error) {
	if e.opts.Contexts == nil && e.opts.Store != nil {
		return e.opts.Store.GetWithoutManifests(ctx, id)
	}
	return e.store.Get(ctx, id)
}
