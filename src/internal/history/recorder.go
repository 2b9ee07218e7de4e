package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/status"
)

// Source computes a group's current state; the status engine implements
// it. A group whose subject is gone is errdefs.ErrNotFound.
type Source interface {
	Snapshot(ctx context.Context, group string) (status.Snapshot, error)
}

// Owner says which groups this process records. An HA replica set makes
// each group owned by exactly one replica; the recorder's cursor guard
// keeps a hand-over that briefly overlaps from writing anything twice.
type Owner interface {
	Owns(group string) bool
}

// AllGroups owns every group: one orchestrator records everything.
type AllGroups struct{}

// Owns is always true.
func (AllGroups) Owns(string) bool { return true }

var _ Owner = AllGroups{}

// Recordable reports the groups that have a history: deployment intent
// groups and v1 instances (not clusters' network intents or logical
// clouds).
func Recordable(group string) bool {
	g, _ := catalog.ParseGroup(group)
	return g.Kind == catalog.GroupDIG || g.Kind == catalog.GroupInstance
}

// RecorderOptions configures a Recorder; Store and Source are required.
type RecorderOptions struct {
	Store  *Store
	Source Source
	// Owner chooses the groups recorded here; nil means AllGroups.
	Owner Owner
	// Groups lists every group known, to catch up on start and on Resync
	// (appcontext.Cache.Groups); nil records only what Changed names.
	Groups func(ctx context.Context) ([]string, error)
	// Workers record groups concurrently; 0 means 2.
	Workers int
	// Registerer receives the recorder's metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *logrus.Entry
	Now        func() time.Time
}

// Recorder records the history of the groups it owns. Changed and Resync
// only enqueue group names; workers take each from a rate-limited
// workqueue (a group queued again while being recorded is recorded once
// more afterwards, so bursts coalesce and nothing is missed).
type Recorder struct {
	opts    RecorderOptions
	log     *logrus.Entry
	entries prometheus.Counter
	errs    prometheus.Counter
	resync  chan struct{}

	mu sync.Mutex
	// queue exists while Run runs; changes before that are covered by
	// Run's catch-up, which lists every group after the queue exists.
	queue workqueue.TypedRateLimitingInterface[string]
	// seen is when each new resource still settling (settle) was first
	// seen, by group and resource key.
	seen map[string]map[string]time.Time
}

// NewRecorder returns a Recorder; Run starts it.
func NewRecorder(opts RecorderOptions) (*Recorder, error) {
	if opts.Store == nil || opts.Source == nil {
		return nil, errors.New("history: Store and Source are required")
	}
	if opts.Owner == nil {
		opts.Owner = AllGroups{}
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Now().UTC() }
	}
	r := &Recorder{opts: opts, log: opts.Logger, resync: make(chan struct{}, 1), seen: map[string]map[string]time.Time{},
		entries: prometheus.NewCounter(prometheus.CounterOpts{Name: "argus_history_entries_total",
			Help: "History entries recorded by this process."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: "argus_history_errors_total",
			Help: "Failed attempts to record a group's history (each is retried)."}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{r.entries, r.errs} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("history: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Changed is told the groups a batch of changes touched; it never blocks.
func (r *Recorder) Changed(groups []string) {
	r.mu.Lock()
	queue := r.queue
	r.mu.Unlock()
	if queue == nil {
		return
	}
	for _, g := range groups {
		if Recordable(g) && r.opts.Owner.Owns(g) {
			queue.Add(g)
		}
	}
}

// Resync records every owned group again (from its cursor, so nothing is
// duplicated): for a replica that was just handed groups.
func (r *Recorder) Resync() {
	select {
	case r.resync <- struct{}{}:
	default:
	}
}

// Run records until ctx ends, then stops its workers and waits for them.
// It first catches up on every known group: changes made while no
// recorder ran are recorded now.
func (r *Recorder) Run(ctx context.Context) error {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "history"})
	r.mu.Lock()
	if r.queue != nil {
		r.mu.Unlock()
		queue.ShutDown()
		return errors.New("history: Recorder already running")
	}
	r.queue = queue
	r.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		queue.ShutDown()
		wg.Wait()
		r.mu.Lock()
		r.queue = nil
		r.mu.Unlock()
	}()
	for range r.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.next(ctx, queue) {
			}
		}()
	}
	r.Resync()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.resync:
			if r.opts.Groups == nil {
				continue
			}
			groups, err := r.opts.Groups(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("history: list groups: %w", err)
			}
			r.Changed(groups)
		}
	}
}

func (r *Recorder) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string]) bool {
	group, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(group)
	if !r.opts.Owner.Owns(group) {
		queue.Forget(group) // handed to another replica meanwhile
		return true
	}
	again, err := r.record(ctx, group)
	if err != nil {
		if ctx.Err() == nil {
			r.errs.Inc()
			r.log.WithError(err).WithField("group", group).Warn("cannot record history; retrying")
			queue.AddRateLimited(group)
		}
		return true
	}
	queue.Forget(group)
	if !again.IsZero() {
		// Resources still settling after their apply: record them when
		// their window closes, if nothing else comes first.
		queue.AddAfter(group, again.Sub(r.opts.Now())+10*time.Millisecond)
	}
	return true
}

// Record diffs a group's current state against its cursor and appends
// the transitions. A subject that is gone has its history dropped.
func (r *Recorder) Record(ctx context.Context, group string) error {
	_, err := r.record(ctx, group)
	return err
}

// record is Record, and says when to record the group again for the
// resources it held back while they settle (zero: none).
func (r *Recorder) record(ctx context.Context, group string) (time.Time, error) {
	for attempt := 0; ; attempt++ {
		cur, rev, err := r.opts.Store.load(ctx, group)
		if err != nil {
			return time.Time{}, err
		}
		snap, err := r.opts.Source.Snapshot(ctx, group)
		if errors.Is(err, errdefs.ErrNotFound) {
			r.setSeen(group, nil)
			if rev == 0 {
				return time.Time{}, nil
			}
			return time.Time{}, r.opts.Store.Delete(ctx, group)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("snapshot %s: %w", group, err)
		}
		now := r.opts.Now()
		r.mu.Lock()
		seen := r.seen[group]
		r.mu.Unlock()
		settled, held, again := settle(cur, snap, now, seen)
		entries := diff(cur, settled, now)
		if len(entries) == 0 {
			r.setSeen(group, held)
			return again, nil
		}
		_, written, err := r.opts.Store.append(ctx, group, cur, rev, entries)
		if errors.Is(err, errMoved) && attempt < 3 {
			continue // another writer came first: diff against what it wrote
		}
		if err != nil {
			return time.Time{}, err
		}
		r.setSeen(group, held)
		r.entries.Add(float64(len(written)))
		return again, nil
	}
}

// setSeen keeps a group's first sightings of resources still settling.
func (r *Recorder) setSeen(group string, held map[string]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(held) == 0 {
		delete(r.seen, group)
		return
	}
	r.seen[group] = held
}
