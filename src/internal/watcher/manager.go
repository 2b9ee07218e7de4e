package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// Clusters gives a watcher its cluster's client.
type Clusters interface {
	Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error)
}

// Claims decides which clusters this process watches when several
// replicas share the work (ownership.Kind): the manager says which
// clusters need a watcher (Want, Drop) and runs one for each cluster it is
// handed (Acquired) until it is taken back (Released).
type Claims interface {
	Want(item string)
	Drop(item string)
	// Fence is this replica's fence for a cluster it holds: its writes
	// carry its guards, and the cluster's state lives on its lease.
	Fence(item string) (ownership.Fence, bool)
}

// Remote says which clusters report by themselves (pull clusters, whose
// agents stream their status to the fleet hub): no watcher dials them.
type Remote interface {
	Pulls(ref appcontext.ClusterRef) bool
}

// Options configures a Manager; Store and Clusters are required.
type Options struct {
	Store    *appcontext.Store
	Clusters Clusters
	// Remote, when set, names the clusters that get no watcher.
	Remote Remote
	// Claims, when set, hands out the clusters to watch; nil watches every
	// cluster that needs it.
	Claims Claims
	// SilentAfter is how long the monitor's Lease may stay unrenewed before
	// the monitor is Silent; 0 means 30s.
	SilentAfter time.Duration
	// LeaseNamespace and LeaseName locate the monitor's Lease; "" means
	// kube-system and argus-monitor.
	LeaseNamespace, LeaseName string
	// ProbeInterval is how often a watcher checks that its cluster's API
	// server answers; 0 means 5s. Informers cannot tell: client-go retries a
	// refused watch quietly, so a dead API server produces no event.
	ProbeInterval time.Duration
	Logger        *logrus.Entry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager owns the per-cluster watchers.
type Manager struct {
	opts Options
	log  *logrus.Entry

	mu       sync.Mutex
	ctx      context.Context // Run's, once it runs
	watchers map[appcontext.ClusterRef]*clusterWatcher
	users    map[appcontext.ClusterRef]map[string]bool // cluster → live context ids
	owned    map[appcontext.ClusterRef]bool            // handed to this process (with Claims)
	// stopping are the watchers a clean stop took (stopAll) until it has
	// left their states: Released, which the ownership set calls before
	// it revokes the lease, leaves the state of one it finds there.
	stopping map[appcontext.ClusterRef]*clusterWatcher
	// stopCtx bounds all of a clean stop's hand-over writes together.
	stopCtx context.Context
	wg      sync.WaitGroup

	// placed is what a cluster's bundles may report on: cluster → live
	// context id → its apps there. Its own lock: watchers read it while
	// mu may be held waiting for one of them to stop.
	placedMu sync.RWMutex
	placed   map[appcontext.ClusterRef]map[string]map[string]bool
	// statusIDs are the live contexts' status context ids, which label
	// their bundles: a migrated DIG's context keeps its source's.
	statusIDs map[string]string
}

// New returns a Manager.
func New(opts Options) (*Manager, error) {
	if opts.Store == nil || opts.Clusters == nil {
		return nil, errors.New("watcher: Store and Clusters are required")
	}
	if opts.SilentAfter == 0 {
		opts.SilentAfter = appcontext.DefaultSilentAfter
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = "kube-system"
	}
	if opts.LeaseName == "" {
		opts.LeaseName = "argus-monitor"
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{opts: opts, log: opts.Logger, watchers: map[appcontext.ClusterRef]*clusterWatcher{},
		users: map[appcontext.ClusterRef]map[string]bool{}, owned: map[appcontext.ClusterRef]bool{}, placed: map[appcontext.ClusterRef]map[string]map[string]bool{},
		statusIDs: map[string]string{}}, nil
}

// Run starts watchers for the live contexts and follows context changes
// until ctx ends; then it stops every watcher and waits for them. A failed
// list or watch (etcd without a leader, a compaction) is retried with a
// fresh list (etcdwatch), which settles the contexts that changed or went
// meanwhile: giving up would leave this replica's clusters unwatched while
// its lease, and so its claims on them, live on.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	defer m.stopAll()
	prefix := m.opts.Store.StatusPrefix()
	f, err := etcdwatch.New(etcdwatch.Options{Client: m.opts.Store.Client(), Prefixes: []string{prefix}, Name: "context statuses", Logger: m.log,
		Apply: func(b etcdwatch.Batch) {
			for _, ev := range b.Events {
				var st appcontext.Status
				if !ev.Deleted {
					_ = json.Unmarshal(ev.Value, &st) // a malformed status reads as not live
				}
				m.contextChanged(ctx, strings.TrimPrefix(ev.Key, prefix), st.Status)
			}
		}})
	if err != nil {
		return err
	}
	f.Run(ctx)
	return ctx.Err()
}

// live reports whether a context in this status still needs its clusters watched.
func live(status string) bool {
	return status != "" && status != appcontext.Terminated
}

func (m *Manager) contextChanged(ctx context.Context, id, status string) {
	var clusters []appcontext.ClusterRef
	apps := map[appcontext.ClusterRef]map[string]bool{}
	statusID := ""
	if live(status) {
		var err error
		statusID, apps, err = m.opts.Store.Placed(ctx, id)
		if err != nil {
			m.log.WithError(err).WithField("context", id).Warn("cannot read context")
			return
		}
		for ref := range apps {
			clusters = append(clusters, ref)
		}
		slices.SortFunc(clusters, func(a, b appcontext.ClusterRef) int { return strings.Compare(a.String(), b.String()) })
	}
	m.setPlaced(id, apps)
	m.setStatusID(id, statusID)
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := map[appcontext.ClusterRef]bool{}
	for _, ref := range clusters {
		if m.opts.Remote != nil && m.opts.Remote.Pulls(ref) {
			continue // its agent reports through the fleet hub
		}
		keep[ref] = true
		if m.users[ref] == nil {
			m.users[ref] = map[string]bool{}
		}
		m.users[ref][id] = true
		if m.opts.Claims != nil {
			m.opts.Claims.Want(ref.String())
		}
		if _, ok := m.watchers[ref]; !ok && m.mayWatchLocked(ref) {
			m.startLocked(ctx, ref)
		}
	}
	for ref, ids := range m.users {
		if ids[id] && !keep[ref] {
			delete(ids, id)
			if len(ids) == 0 {
				delete(m.users, ref)
				if m.opts.Claims != nil {
					m.opts.Claims.Drop(ref.String())
				}
				if w := m.watchers[ref]; w != nil {
					w.stop()
					delete(m.watchers, ref)
					m.log.WithField("cluster", ref.String()).Info("watcher stopped: no live contexts")
				}
			}
		}
	}
}

// mayWatchLocked reports whether this process may run the cluster's
// watcher: always alone, only when handed the cluster with Claims.
func (m *Manager) mayWatchLocked(ref appcontext.ClusterRef) bool {
	return m.opts.Claims == nil || m.owned[ref]
}

// Acquired hands a cluster to this process (see Claims): it watches it
// while any live context places on it.
func (m *Manager) Acquired(item string) {
	ref, err := appcontext.ParseClusterRef(item)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owned[ref] = true
	if m.ctx != nil && len(m.users[ref]) > 0 && m.watchers[ref] == nil {
		m.startLocked(m.ctx, ref)
	}
}

// Released takes a cluster back: its watcher stops before it returns.
func (m *Manager) Released(item string) {
	ref, err := appcontext.ParseClusterRef(item)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owned, ref)
	if w := m.stopping[ref]; w != nil {
		// A clean stop under way: leave the state now, while the claim
		// that guards the write still holds.
		delete(m.stopping, ref)
		w.stop()
		w.detach(m.stopCtx)
		return
	}
	if w := m.watchers[ref]; w != nil {
		w.stop()
		delete(m.watchers, ref)
		// Handed over while alive: the state it published stays, off this
		// replica's lease, until the next watcher publishes its own, so
		// a handover shows nothing when nothing changed.
		w.detach(context.Background())
		m.log.WithField("cluster", ref.String()).Info("watcher stopped: the cluster went to another replica")
	}
}

func (m *Manager) startLocked(ctx context.Context, ref appcontext.ClusterRef) {
	var fence ownership.Fence
	if m.opts.Claims != nil {
		var held bool
		if fence, held = m.opts.Claims.Fence(ref.String()); !held {
			return // being released
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &clusterWatcher{m: m, ref: ref, cancel: cancel, done: make(chan struct{}), fence: fence,
		log: m.log.WithField("cluster", ref.String())}
	m.watchers[ref] = w
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(w.done)
		w.run(wctx)
	}()
	w.log.Info("watcher started")
}

// setPlaced records a context's apps per cluster (none once it is no
// longer live).
func (m *Manager) setPlaced(id string, apps map[appcontext.ClusterRef]map[string]bool) {
	m.placedMu.Lock()
	defer m.placedMu.Unlock()
	for ref, ids := range m.placed {
		if _, ok := apps[ref]; !ok {
			delete(ids, id)
			if len(ids) == 0 {
				delete(m.placed, ref)
			}
		}
	}
	for ref, a := range apps {
		if m.placed[ref] == nil {
			m.placed[ref] = map[string]map[string]bool{}
		}
		m.placed[ref][id] = a
	}
}

// setStatusID records a live context's status context id ("" once it is
// no longer live).
func (m *Manager) setStatusID(id, statusID string) {
	m.placedMu.Lock()
	defer m.placedMu.Unlock()
	if statusID == "" || statusID == id {
		delete(m.statusIDs, id)
		return
	}
	m.statusIDs[id] = statusID
}

// placedOn is a copy of what the live contexts place on a cluster:
// context id → its apps there.
func (m *Manager) placedOn(ref appcontext.ClusterRef) map[string]map[string]bool {
	m.placedMu.RLock()
	defer m.placedMu.RUnlock()
	out := make(map[string]map[string]bool, len(m.placed[ref]))
	for id, apps := range m.placed[ref] {
		out[id] = maps.Clone(apps)
	}
	return out
}

// placedContext is the live context a bundle labelled with a status
// context id reports for: the context of that id, or one that keeps it
// (a migrated DIG's), if it places app on the cluster.
func (m *Manager) placedContext(ref appcontext.ClusterRef, statusID, app string) (string, bool) {
	m.placedMu.RLock()
	defer m.placedMu.RUnlock()
	if m.placed[ref][statusID][app] && m.statusIDs[statusID] == "" {
		return statusID, true
	}
	for id, apps := range m.placed[ref] {
		if m.statusIDs[id] == statusID && apps[app] {
			return id, true
		}
	}
	return "", false
}

// Forget stops a deleted cluster's watcher.
func (m *Manager) Forget(ref appcontext.ClusterRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.watchers[ref]; w != nil {
		w.stop()
		delete(m.watchers, ref)
	}
	if _, ok := m.users[ref]; ok && m.opts.Claims != nil {
		m.opts.Claims.Drop(ref.String())
	}
	delete(m.users, ref)
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	m.ctx = nil // no watcher starts from now on
	m.stopping = map[appcontext.ClusterRef]*clusterWatcher{}
	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m.stopCtx = stopCtx
	for ref, w := range m.watchers {
		w.cancel()
		m.stopping[ref] = w
		delete(m.watchers, ref)
	}
	m.mu.Unlock()
	m.wg.Wait()
	// A clean stop hands its clusters over as Released does: the states
	// they published stay, off this replica's lease, until the next
	// watcher — after a restart, or another replica's — publishes its own.
	// Left on the lease they went with it, and until then every subscriber
	// heard each cluster's resources go Unknown and its pods deleted, then
	// come back (a reader judges a state left behind silent by its age, as
	// any other). The write is guarded by the claim, which the ownership
	// set's revoke ends: the set calls Released before it revokes, and
	// Released waits for the lock held here.
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.stopping {
		w.detach(stopCtx)
	}
	m.stopping, m.stopCtx = nil, nil
}
