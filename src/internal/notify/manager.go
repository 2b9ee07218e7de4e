package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/rungroup"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// Subject kinds: what a subscription watches.
const (
	SubjectInstance = "instance"
	SubjectDIG      = "dig"
)

// Subject is the instance or deployment intent group a subscription is on.
type Subject struct {
	Kind string
	// Key is {instance id} or the DIG's catalogue key.
	Key catalog.Key
}

// InstanceSubject is a v1 instance.
func InstanceSubject(id string) Subject { return Subject{Kind: SubjectInstance, Key: catalog.Key{id}} }

// DIGSubject is a deployment intent group.
func DIGSubject(dig catalog.Key) Subject { return Subject{Kind: SubjectDIG, Key: dig} }

// Group is the change-routing group of the subject's contexts.
func (s Subject) Group() string {
	if s.Kind == SubjectInstance {
		return catalog.InstanceGroup(s.Key[0])
	}
	return catalog.DIGGroup(s.Key)
}

func (s Subject) kind() *catalog.Kind {
	if s.Kind == SubjectInstance {
		return catalog.InstanceSubscriptions
	}
	return catalog.DIGSubscriptions
}

func (s Subject) prefix() string { return s.Kind + "/" + strings.Join(s.Key, "/") + "/" }

func (s Subject) stateKey(name string) string { return s.prefix() + name }

// Subscription is a subscription as clients write it: its name and the
// stored spec (SPEC section 8).
type Subscription struct {
	Name string `json:"name"`
	catalog.SubscriptionSpec
}

// Query is the status query of the filters.
func (s Subscription) Query() url.Values {
	v := url.Values{}
	if s.Type != "" {
		v.Set("type", s.Type)
	}
	if s.Output != "" {
		v.Set("output", s.Output)
	}
	v["app"], v["cluster"], v["resource"] = s.App, s.Cluster, s.Resource
	for k, l := range v {
		if len(l) == 0 {
			delete(v, k)
		}
	}
	return v
}

func (s Subscription) hasFilters() bool { return len(s.Query()) > 0 }

// View is a subscription as GET answers it: never the secret, and its
// delivery state. The times and last-notify-status have k8splugin's types:
// RFC 3339 timestamps (both are the creation time until something
// happens, as in k8splugin) and the HTTP status of the last answer, 0
// before the first and 500 for a network failure, as k8splugin records
// them; delivery.last-error says what failed.
type View struct {
	Subscription
	LastUpdateTime   time.Time    `json:"last-update-time"`
	LastNotifyTime   time.Time    `json:"last-notify-time"`
	LastNotifyStatus int32        `json:"last-notify-status"`
	Delivery         DeliveryView `json:"delivery"`
}

// DeliveryView is the delivery part of a View.
type DeliveryView struct {
	Pending   bool   `json:"pending"`
	Sequence  int64  `json:"sequence"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last-error"`
}

// networkFailure is what k8splugin records as the status of a delivery
// that got no HTTP answer.
const networkFailure = 500

func view(sub Subscription, st State) View {
	sub.Secret = ""
	v := View{Subscription: sub, LastUpdateTime: st.Created, LastNotifyTime: st.Created,
		Delivery: DeliveryView{Pending: st.Pending != nil, Sequence: st.Sequence, Attempts: st.Attempts, LastError: st.LastError}}
	if !st.LastUpdate.IsZero() {
		v.LastUpdateTime = st.LastUpdate
	}
	if !st.LastNotify.IsZero() {
		v.LastNotifyTime = st.LastNotify
	}
	switch code, err := strconv.Atoi(st.LastStatus); {
	case err == nil:
		v.LastNotifyStatus = int32(code)
	case st.LastStatus != "":
		v.LastNotifyStatus = networkFailure
	}
	return v
}

// Feeds compute subjects' current views; the status engine implements it.
type Feeds interface {
	InstanceFeed(ctx context.Context, id string) (entries []Entry, ready bool, err error)
	// DIGFeed also returns the head digest: what of the answer beyond its
	// resources counts as a change (the lifecycle status, readiness).
	DIGFeed(ctx context.Context, dig catalog.Key, q url.Values) (entries Runs, response any, head string, err error)
}

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	Catalog   *catalog.Catalog
	States    *States
	Deliverer *Deliverer
	Feeds     Feeds
	// CheckQuery validates a DIG subscription's filters.
	CheckQuery func(url.Values) error
	Metrics    *Metrics
	Logger     *logrus.Entry
	// BackoffBase scales retry backoff (tests); 0 means as documented.
	BackoffBase time.Duration
	// Subscriptions hands out the subscriptions whose workers run here:
	// with several replicas each runs on exactly one (ownership.Kind).
	// Required.
	Subscriptions Claims
	// Prefix is the etcd prefix of the subscription markers and their
	// owners' acknowledgements; "" means etcdstore.DefaultPrefix.
	Prefix string
	// Lease is this replica's lease, which acknowledgements are put on so
	// they vanish with it; nil writes them without one.
	Lease func() clientv3.LeaseID
	// AckWait bounds how long a subscription change waits for its owner to
	// take it up (a dead owner's successor needs up to the lease TTL);
	// 0 means 60s.
	AckWait time.Duration
	// MaxSubscriptions bounds the subscriptions in all, and
	// MaxPerSubject those of one DIG or instance; one more is refused with
	// 409. 0 means DefaultMaxSubscriptions and DefaultMaxPerSubject.
	MaxSubscriptions, MaxPerSubject int
}

// Subscription caps unless ManagerOptions says: each subscription costs a
// worker, a status computation per change of its subject, and deliveries.
const (
	DefaultMaxSubscriptions = 10000
	DefaultMaxPerSubject    = 100
)

// Manager owns one worker per subscription, routes every change to the
// workers of the group it touches, and
// serves the subscription API. Workers compute views through a memo shared
// by every subscription to the same subject and filters, so one change
// costs one status computation however many subscribe.
type Manager struct {
	opts  ManagerOptions
	log   *logrus.Entry
	ready chan struct{}

	// ops serialises subscription changes, so a worker is never started
	// and stopped concurrently for one key.
	ops sync.Mutex
	// creating serialises the cap check and the store of new
	// subscriptions on this replica.
	creating sync.Mutex

	// tasks are the goroutines Run owns: workers, reconciles, retries.
	tasks rungroup.Group

	mu        sync.Mutex
	workers   map[string]*handle           // by state key
	listeners map[string]map[uint64]func() // by group
	all       map[uint64]func()            // told of every group's changes
	gens      map[string]uint64            // change generation by group
	memo      map[string]*memoEntry        // by group + query
	nextID    uint64

	// With several replicas (see shared.go): the markers as etcd has them,
	// the markers of the subscriptions handed to this replica, those
	// subscriptions, and the generation each running worker started for.
	records *markerRecords
	markers map[string]marker
	owned   map[string]bool
	running map[string]string
}

type handle struct {
	subj   Subject
	w      *Worker
	cancel context.CancelFunc
	done   chan struct{}
	unlist func()
}

// NewManager returns a Manager; Run starts it.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Catalog == nil || opts.States == nil || opts.Deliverer == nil || opts.Feeds == nil || opts.Subscriptions == nil {
		return nil, errors.New("notify: Catalog, States, Deliverer, Feeds and Subscriptions are required")
	}
	opts.Prefix = etcdstore.Prefix(opts.Prefix)
	if opts.Lease == nil {
		opts.Lease = func() clientv3.LeaseID { return 0 }
	}
	if opts.AckWait == 0 {
		opts.AckWait = time.Minute
	}
	if opts.MaxSubscriptions <= 0 {
		opts.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if opts.MaxPerSubject <= 0 {
		opts.MaxPerSubject = DefaultMaxPerSubject
	}
	if opts.CheckQuery == nil {
		opts.CheckQuery = func(url.Values) error { return nil }
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	m := &Manager{opts: opts, log: opts.Logger, ready: make(chan struct{}), workers: map[string]*handle{},
		listeners: map[string]map[uint64]func(){}, all: map[uint64]func(){}, gens: map[string]uint64{}, memo: map[string]*memoEntry{},
		markers: map[string]marker{}, owned: map[string]bool{}, running: map[string]string{}}
	var err error
	if m.records, err = newMarkerRecords(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Ready is closed once the subscriptions are known (every stored one has
// its marker, each marker is wanted): from then on the API may change them.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Run follows the subscription markers until ctx ends, running the
// workers of the subscriptions this replica is handed;
// then it stops and waits for all of them.
func (m *Manager) Run(ctx context.Context) error {
	ctx, stop := m.tasks.Start(ctx)
	defer stop()
	if err := m.mark(ctx); err != nil {
		return fmt.Errorf("notify: resume subscriptions: %w", err)
	}
	m.follow(ctx)
	return nil
}

// Changed is told the groups whose status may have changed; it wakes their
// workers and watches and never blocks.
func (m *Manager) Changed(groups []string) {
	var wake []func()
	m.mu.Lock()
	if len(groups) > 0 {
		for _, f := range m.all {
			wake = append(wake, f)
		}
	}
	for _, g := range groups {
		if len(m.listeners[g]) == 0 {
			continue // nobody computes views of it, so no generation to keep
		}
		m.gens[g]++
		for _, f := range m.listeners[g] {
			wake = append(wake, f)
		}
	}
	m.mu.Unlock()
	for _, f := range wake {
		f()
	}
}

// ListenAll registers f to be called, without blocking, after any change
// of any group (an overview follows them all), and returns its removal.
func (m *Manager) ListenAll(f func()) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	id := m.nextID
	m.all[id] = f
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.all, id)
	}
}

// Listen registers f, which must not block, for the changes of a group's
// status (the gRPC status notifications follow it) and returns its
// removal.
func (m *Manager) Listen(group string, f func()) func() { return m.listen(group, f) }

// listen registers f for a group's changes and returns its removal.
func (m *Manager) listen(group string, f func()) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	id := m.nextID
	if m.listeners[group] == nil {
		m.listeners[group] = map[uint64]func(){}
	}
	m.listeners[group][id] = f
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.listeners[group], id)
		if len(m.listeners[group]) == 0 {
			delete(m.listeners, group)
			delete(m.gens, group)
			for k := range m.memo {
				if strings.HasPrefix(k, group+"?") {
					delete(m.memo, k)
				}
			}
		}
	}
}

// memoEntry is one computed view, valid while its group's generation is.
type memoEntry struct {
	gen      uint64
	done     chan struct{}
	entries  Runs
	response any
	head     string
	ready    bool
	err      error
}

// feed computes a subject's view once per change, whoever asks.
func (m *Manager) feed(ctx context.Context, subj Subject, q url.Values) (*memoEntry, error) {
	key := subj.Group() + "?" + q.Encode()
	m.mu.Lock()
	gen := m.gens[subj.Group()]
	e := m.memo[key]
	if e == nil || e.gen != gen {
		e = &memoEntry{gen: gen, done: make(chan struct{})}
		m.memo[key] = e
		m.mu.Unlock()
		// Others wait on this computation: one caller going away must not
		// fail it for them.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if subj.Kind == SubjectInstance {
			var flat []Entry
			flat, e.ready, e.err = m.opts.Feeds.InstanceFeed(cctx, subj.Key[0])
			e.entries = Runs{flat}
		} else {
			e.entries, e.response, e.head, e.err = m.opts.Feeds.DIGFeed(cctx, subj.Key, q)
		}
		cancel()
		close(e.done)
		if e.err != nil { // never keep a failure
			m.mu.Lock()
			if m.memo[key] == e {
				delete(m.memo, key)
			}
			m.mu.Unlock()
		}
	} else {
		m.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e, e.err
}

// instanceEnvelope is an instance notification without its changes.
type instanceEnvelope struct {
	InstanceID       string         `json:"instance-id"`
	SubscriptionName string         `json:"subscription-name,omitempty"`
	Metadata         map[string]any `json:"metadata,omitempty"`
	Ready            bool           `json:"ready"`
}

// digEnvelope is the status response with the subscription's name and
// metadata first.
type digEnvelope struct {
	name     string
	metadata map[string]any
	response any
	head     string
}

// HeadDigest makes a lifecycle or readiness change a change.
func (d digEnvelope) HeadDigest() string { return d.head }

func (d digEnvelope) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		SubscriptionName string         `json:"subscription-name,omitempty"`
		Metadata         map[string]any `json:"metadata,omitempty"`
	}{d.name, d.metadata})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(d.response)
	if err != nil {
		return nil, err
	}
	return mergeObjects(head, body)
}

func (m *Manager) source(subj Subject, sub Subscription) Source {
	q := sub.Query()
	return func(ctx context.Context) (Runs, any, error) {
		e, err := m.feed(ctx, subj, q)
		if err != nil {
			return nil, nil, err
		}
		if subj.Kind == SubjectInstance {
			return e.entries, instanceEnvelope{InstanceID: subj.Key[0], SubscriptionName: sub.Name, Metadata: sub.Metadata, Ready: e.ready}, nil
		}
		return e.entries, digEnvelope{name: sub.Name, metadata: sub.Metadata, response: e.response, head: e.head}, nil
	}
}

// start runs a subscription's worker under the manager's context.
func (m *Manager) start(subj Subject, sub Subscription) *handle {
	key := subj.stateKey(sub.Name)
	w, err := NewWorker(WorkerOptions{Key: key, URL: sub.CallbackURL, Secret: sub.Secret,
		MinInterval: time.Duration(sub.MinNotifyInterval) * time.Second, Source: m.source(subj, sub),
		States: m.opts.States, Deliverer: m.opts.Deliverer, Metrics: m.opts.Metrics, BackoffBase: m.opts.BackoffBase,
		Guard:  func() clientv3.Cmp { return m.opts.Subscriptions.Guard(key) },
		Logger: m.log.WithField("subject", subj.Kind+":"+strings.Join(subj.Key, "/"))})
	if err != nil {
		panic(err) // every required option is set above
	}
	return m.run(subj, w)
}

func (m *Manager) run(subj Subject, w *Worker) *handle {
	ctx := m.tasks.Context()
	if ctx == nil {
		panic("notify: Manager used before Run")
	}
	wctx, cancel := context.WithCancel(ctx)
	h := &handle{subj: subj, w: w, cancel: cancel, done: make(chan struct{})}
	h.unlist = m.listen(subj.Group(), w.Notify)
	m.mu.Lock()
	m.workers[w.opts.Key] = h
	m.mu.Unlock()
	started := m.tasks.Go(func() {
		defer close(h.done)
		if err := w.Run(wctx); err != nil {
			m.log.WithError(err).WithField("subscription", w.opts.Key).Error("subscription worker stopped")
		}
	})
	if !started {
		close(h.done)
	}
	return h
}

// stop ends a worker and waits for it; an in-flight POST is abandoned.
func (m *Manager) stop(key string) {
	m.mu.Lock()
	h := m.workers[key]
	delete(m.workers, key)
	m.mu.Unlock()
	if h == nil {
		return
	}
	h.unlist()
	h.cancel()
	<-h.done
}

func (m *Manager) resource(subj Subject) *catalog.Resource[catalog.SubscriptionSpec] {
	return catalog.For[catalog.SubscriptionSpec](m.opts.Catalog, subj.kind())
}

func (m *Manager) key(subj Subject, name string) catalog.Key {
	return append(append(catalog.Key{}, subj.Key...), name)
}

// validate applies SPEC section 8's rules; violations are ErrInvalid.
func (m *Manager) validate(ctx context.Context, subj Subject, sub Subscription) error {
	if err := catalog.ValidateName("subscription", sub.Name); err != nil {
		return err
	}
	if sub.CallbackURL == "" {
		return errdefs.Invalid("callback-url is missing")
	}
	if sub.MinNotifyInterval < 0 {
		return errdefs.Invalid("min-notify-interval must be 0 or more seconds, not %d", sub.MinNotifyInterval)
	}
	if err := m.opts.Deliverer.CheckURL(ctx, sub.CallbackURL); err != nil {
		return err
	}
	if subj.Kind == SubjectInstance && sub.hasFilters() {
		return errdefs.Invalid("type, output, app, cluster and resource filters are for deployment intent group subscriptions")
	}
	if err := m.opts.CheckQuery(sub.Query()); err != nil {
		return err
	}
	return nil
}

// Create stores a new subscription and has its owner start its worker.
// It answers once the worker has its baseline, so a change made after the
// answer is one the subscriber hears of.
func (m *Manager) Create(ctx context.Context, subj Subject, sub Subscription) (View, error) {
	if err := m.validate(ctx, subj, sub); err != nil {
		return View{}, err
	}
	key := m.key(subj, sub.Name)
	obj := catalog.Object[catalog.SubscriptionSpec]{Metadata: catalog.Metadata{Name: sub.Name}, Spec: sub.SubscriptionSpec}
	if err := m.createCapped(ctx, subj, func() error { return m.resource(subj).Create(ctx, key, obj) }); err != nil {
		return View{}, err
	}
	// A state left by an earlier subscription of the same name is not
	// this one's: the owner starts it afresh.
	gen, err := m.putMarker(ctx, subj.stateKey(sub.Name), resetNew)
	if err != nil {
		if rerr := m.resource(subj).Delete(context.WithoutCancel(ctx), key); rerr != nil {
			m.log.WithError(rerr).Error("cannot roll back a subscription that could not start")
		}
		return View{}, err
	}
	if err := m.waitAck(ctx, subj.stateKey(sub.Name), gen); err != nil {
		return View{}, err
	}
	return m.Get(ctx, subj, sub.Name)
}

// Put creates or replaces a subscription; the URL's name wins. A body
// without a secret keeps the stored one (it is write-only, so a client
// that read the subscription cannot send it back). Changed filters take a
// new baseline; the sequence carries on either way.
func (m *Manager) Put(ctx context.Context, subj Subject, name string, sub Subscription) (View, bool, error) {
	if sub.Name == "" {
		sub.Name = name
	}
	if sub.Name != name {
		return View{}, false, errdefs.Invalid("name %q does not match the name in the URL, %q", sub.Name, name)
	}
	if err := m.validate(ctx, subj, sub); err != nil {
		return View{}, false, err
	}
	key := m.key(subj, sub.Name)
	old, getErr := m.resource(subj).Get(ctx, key)
	if getErr != nil && !errors.Is(getErr, errdefs.ErrNotFound) {
		return View{}, false, getErr
	}
	if sub.Secret == "" {
		sub.Secret = old.Spec.Secret
	}
	obj := catalog.Object[catalog.SubscriptionSpec]{Metadata: catalog.Metadata{Name: sub.Name}, Spec: sub.SubscriptionSpec}
	var created bool
	var err error
	put := func() (err error) {
		created, err = m.resource(subj).Put(ctx, key, obj)
		return err
	}
	if errors.Is(getErr, errdefs.ErrNotFound) {
		err = m.createCapped(ctx, subj, put) // a new one counts against the caps
	} else {
		err = put()
	}
	if err != nil {
		return View{}, false, err
	}
	reset := ""
	switch {
	case created:
		reset = resetNew
	case Subscription{SubscriptionSpec: old.Spec}.Query().Encode() != sub.Query().Encode():
		reset = resetRebaseline
	}
	// Every change restarts the worker with the new callback, secret and
	// interval.
	gen, err := m.putMarker(ctx, subj.stateKey(sub.Name), reset)
	if err != nil {
		return View{}, false, err
	}
	if err := m.waitAck(ctx, subj.stateKey(sub.Name), gen); err != nil {
		return View{}, false, err
	}
	v, err := m.Get(ctx, subj, name)
	return v, created, err
}

// createCapped runs create, which stores a new subscription of subj,
// unless that would pass the caps (409 naming the flag).
func (m *Manager) createCapped(ctx context.Context, subj Subject, create func() error) error {
	m.creating.Lock()
	defer m.creating.Unlock()
	n, err := m.resource(subj).Count(ctx, subj.Key)
	if err != nil {
		return err
	}
	if n >= int64(m.opts.MaxPerSubject) {
		return errdefs.Conflict("this %s has %d subscriptions, the most one may have (--max-subscriptions-per-subject); delete one first", subjectName(subj), n)
	}
	var total int64
	for _, s := range []Subject{{Kind: SubjectDIG}, {Kind: SubjectInstance}} {
		c, err := m.resource(s).Count(ctx, nil)
		if err != nil {
			return err
		}
		total += c
	}
	if total >= int64(m.opts.MaxSubscriptions) {
		return errdefs.Conflict("there are %d subscriptions, the most the orchestrator takes (--max-subscriptions); delete some first", total)
	}
	return create()
}

func subjectName(s Subject) string {
	if s.Kind == SubjectInstance {
		return "instance"
	}
	return "deployment intent group"
}

// Get returns one subscription with its delivery state.
func (m *Manager) Get(ctx context.Context, subj Subject, name string) (View, error) {
	obj, err := m.resource(subj).Get(ctx, m.key(subj, name))
	if err != nil {
		return View{}, err
	}
	st, _, err := m.opts.States.LoadView(ctx, subj.stateKey(name))
	if err != nil {
		return View{}, err
	}
	return view(Subscription{Name: name, SubscriptionSpec: obj.Spec}, st), nil
}

// List returns the subject's subscriptions; a missing subject is NotFound.
func (m *Manager) List(ctx context.Context, subj Subject) ([]View, error) {
	objs, err := m.resource(subj).List(ctx, subj.Key)
	if err != nil {
		return nil, err
	}
	states, err := m.opts.States.LoadPrefix(ctx, subj.prefix())
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(objs))
	for _, o := range objs {
		out = append(out, view(Subscription{Name: o.Metadata.Name, SubscriptionSpec: o.Spec}, states[subj.stateKey(o.Metadata.Name)]))
	}
	return out, nil
}

// Delete removes a subscription; its worker stops before it returns, so no
// POST follows.
func (m *Manager) Delete(ctx context.Context, subj Subject, name string) error {
	if err := m.resource(subj).Delete(ctx, m.key(subj, name)); err != nil {
		return err
	}
	key := subj.stateKey(name)
	if err := m.deleteMarkers(ctx, key, false); err != nil {
		return err
	}
	m.waitAcksGone(ctx, key, false)
	return m.opts.States.Delete(ctx, key)
}

// Forget is told that a subject was deleted (its subscriptions went with
// it in the catalogue): their workers stop and their states go.
func (m *Manager) Forget(ctx context.Context, subj Subject) error {
	if err := m.deleteMarkers(ctx, subj.prefix(), true); err != nil {
		return err
	}
	m.waitAcksGone(ctx, subj.prefix(), true)
	return m.opts.States.DeletePrefix(ctx, subj.prefix())
}
