package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/internal/appcontext"
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

// ScopedSource also computes the state of a group's placements on some
// clusters only, with their readiness (status.Snapshot.Placements): a
// change on a few clusters is then recorded without the whole group's
// status (the status engine implements it).
type ScopedSource interface {
	SnapshotOf(ctx context.Context, group string, clusters []appcontext.ClusterRef) (status.Snapshot, error)
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
	// seen, by group.
	seen map[string]sightings
	// scopes are what changed of each queued group since it was last
	// taken; states what is known of each group recorded (a worker has a
	// group to itself while it records it, the workqueue sees to that).
	scopes map[string]appcontext.Scope
	states map[string]*groupState
}

// groupState is what the recorder knows of a group between changes, so a
// change on a few clusters costs those clusters: the cursor as last
// written (and its revision, which guards the next write) and the
// readiness of each placement, from which the group's readiness follows.
type groupState struct {
	cur        cursor
	rev        int64
	instance   string
	placements map[string]bool
	// again is when held resources are due (settle): a due group is
	// recorded whole.
	again time.Time
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
	r := &Recorder{opts: opts, log: opts.Logger, resync: make(chan struct{}, 1), seen: map[string]sightings{},
		scopes: map[string]appcontext.Scope{}, states: map[string]*groupState{},
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
// Each is recorded whole.
func (r *Recorder) Changed(groups []string) {
	scopes := make(map[string]appcontext.Scope, len(groups))
	for _, g := range groups {
		scopes[g] = appcontext.Scope{All: true}
	}
	r.ChangedScoped(scopes)
}

// ChangedScoped is told what of each group a batch of changes touched
// (appcontext.Cache.OnScopedChange); it never blocks.
func (r *Recorder) ChangedScoped(scopes map[string]appcontext.Scope) {
	r.mu.Lock()
	queue := r.queue
	var add []string
	if queue != nil {
		for g, sc := range scopes {
			if Recordable(g) && r.opts.Owner.Owns(g) {
				cur := r.scopes[g]
				cur.Merge(sc)
				r.scopes[g] = cur
				add = append(add, g)
			}
		}
	}
	r.mu.Unlock()
	for _, g := range add {
		queue.Add(g)
	}
}

// takeScope returns what changed of a group since it was last taken
// (nil: nothing was said, the group came back for its settle time or a
// change already taken).
func (r *Recorder) takeScope(group string) *appcontext.Scope {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc, ok := r.scopes[group]
	if !ok {
		return nil
	}
	delete(r.scopes, group)
	return &sc
}

// putScope gives back a scope whose recording failed, for the retry.
func (r *Recorder) putScope(group string, sc *appcontext.Scope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.scopes[group]
	if sc == nil {
		sc = &appcontext.Scope{All: true}
	}
	cur.Merge(*sc)
	r.scopes[group] = cur
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
	sc := r.takeScope(group)
	if !r.opts.Owner.Owns(group) {
		queue.Forget(group) // handed to another replica meanwhile
		r.forget(group)
		return true
	}
	again, err := r.record(ctx, group, sc)
	if err != nil {
		r.forget(group) // the next attempt reads the cursor again
		if ctx.Err() == nil {
			r.errs.Inc()
			r.log.WithError(err).WithField("group", group).Warn("cannot record history; retrying")
			r.putScope(group, sc)
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
// the transitions. A subject that is gone has its history dropped. It is
// for a Recorder that is not running (tests, tools): Run's workers record
// a group one at a time, and Record beside them would not be.
func (r *Recorder) Record(ctx context.Context, group string) error {
	_, err := r.record(ctx, group, &appcontext.Scope{All: true})
	return err
}

// forget drops what is known of a group: it is read from etcd again.
func (r *Recorder) forget(group string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, group)
}

func (r *Recorder) state(group string) *groupState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[group]
}

// record is Record of what sc says changed (the whole group when it says
// All, or when nothing is known of the group), and says when to record
// the group again for the resources it held back while they settle
// (zero: none).
func (r *Recorder) record(ctx context.Context, group string, sc *appcontext.Scope) (time.Time, error) {
	gs := r.state(group)
	_, scoped := r.opts.Source.(ScopedSource)
	if sc == nil && gs != nil && gs.again.IsZero() {
		return time.Time{}, nil // a change already recorded
	}
	full := gs == nil || sc == nil || sc.All || !scoped
	var prev time.Time // when the group's held-back resources are due
	if gs != nil {
		prev = gs.again
	}
	for attempt := 0; ; attempt++ {
		if full {
			cur, rev, err := r.opts.Store.load(ctx, group)
			if err != nil {
				return time.Time{}, err
			}
			gs = &groupState{cur: cur, rev: rev}
		}
		snap, err := r.snapshot(ctx, group, full, sc)
		if errors.Is(err, errdefs.ErrNotFound) {
			r.setSeen(group, nil, nil)
			r.forget(group)
			if gs.rev == 0 {
				return time.Time{}, nil
			}
			return time.Time{}, r.opts.Store.Delete(ctx, group)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("snapshot %s: %w", group, err)
		}
		if !full && snap.Instance != gs.instance {
			full = true // a new context: everything may have changed
			continue
		}
		var in map[string]bool // the clusters recorded; nil: all
		if !full {
			in = clusterSet(sc)
		}
		gs.fold(snap, in)
		if !full {
			snap.Ready = gs.ready()
		}
		again, err := r.recordSnapshot(ctx, group, gs, snap, in)
		if errors.Is(err, errMoved) && attempt < 3 {
			full = true
			continue // another writer came first: diff against what it wrote
		}
		if err != nil {
			return time.Time{}, err
		}
		if !full && !prev.IsZero() && (again.IsZero() || prev.Before(again)) {
			// Resources held back on other clusters still settle: their
			// re-record is due whatever this one found on its clusters.
			again = prev
		}
		gs.again = again
		r.mu.Lock()
		r.states[group] = gs
		r.mu.Unlock()
		return again, nil
	}
}

// snapshot asks the source for the whole group, or the clusters sc names.
func (r *Recorder) snapshot(ctx context.Context, group string, full bool, sc *appcontext.Scope) (status.Snapshot, error) {
	src, ok := r.opts.Source.(ScopedSource)
	if full || !ok {
		return r.opts.Source.Snapshot(ctx, group)
	}
	clusters := make([]appcontext.ClusterRef, 0, len(sc.Clusters))
	for c := range sc.Clusters {
		clusters = append(clusters, c)
	}
	return src.SnapshotOf(ctx, group, clusters)
}

// recordSnapshot diffs snap (of the clusters in, all when nil) against
// the group's cursor and appends what changed.
func (r *Recorder) recordSnapshot(ctx context.Context, group string, gs *groupState, snap status.Snapshot, in map[string]bool) (time.Time, error) {
	now := r.opts.Now()
	r.mu.Lock()
	seen := r.seen[group]
	r.mu.Unlock()
	settled, held, again := settle(gs.cur, snap, now, seen)
	entries := diffIn(gs.cur, settled, now, in)
	if len(entries) == 0 {
		r.setSeen(group, held, in)
		return again, nil
	}
	cur, rev, err := r.opts.Store.append(ctx, group, gs.cur, gs.rev, entries)
	if err != nil {
		return time.Time{}, err
	}
	gs.cur, gs.rev = cur, rev
	r.setSeen(group, held, in)
	r.entries.Add(float64(len(entries)))
	return again, nil
}

func clusterSet(sc *appcontext.Scope) map[string]bool {
	out := make(map[string]bool, len(sc.Clusters))
	for c := range sc.Clusters {
		out[c.String()] = true
	}
	return out
}

// fold takes a snapshot's placements (of the clusters in; all when nil)
// into what is known of the others.
func (gs *groupState) fold(snap status.Snapshot, in map[string]bool) {
	if in == nil || gs.placements == nil {
		gs.instance, gs.placements = snap.Instance, snap.Placements
		return
	}
	for k := range gs.placements {
		if _, cl, _ := strings.Cut(k, "|"); in[cl] {
			delete(gs.placements, k)
		}
	}
	for k, ok := range snap.Placements {
		gs.placements[k] = ok
	}
}

// ready is the group's readiness as status.Build has it: some placement,
// and every one ready.
func (gs *groupState) ready() bool {
	for _, ok := range gs.placements {
		if !ok {
			return false
		}
	}
	return len(gs.placements) > 0
}

// setSeen keeps a group's first sightings of resources still settling,
// of the clusters in (all when nil): those of others stay.
func (r *Recorder) setSeen(group string, held sightings, in map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.seen[group]; in != nil && len(cur) > 0 {
		for cl := range in {
			delete(cur, cl)
		}
		for cl, m := range held {
			cur[cl] = m
		}
		held = cur
	}
	if len(held) == 0 {
		delete(r.seen, group)
		return
	}
	r.seen[group] = held
}
