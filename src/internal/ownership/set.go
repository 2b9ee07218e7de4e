package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// Options configures a Set; Client and ID are required.
type Options struct {
	Client *clientv3.Client
	// Prefix of every key; "" means etcdstore.DefaultPrefix.
	Prefix string
	// ID names this replica; it must be unique among live replicas (a
	// second process with the same id waits until the first one's lease
	// is gone).
	ID string
	// URL is where clients reach this replica's API, for operators.
	URL string
	// TTL of the replica's lease: how long a dead replica keeps its work
	// before the others take it over. 0 means 10s; it is rounded up to
	// whole seconds (etcd's unit).
	TTL time.Duration
	// Workers per kind acquire and release items concurrently; 0 means 4.
	Workers int
	// Registerer receives the ownership metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *logrus.Entry
	Now        func() time.Time
}

// Member is a live replica as it registers itself.
type Member struct {
	ID      string    `json:"id"`
	URL     string    `json:"url"`
	Started time.Time `json:"started"`
	// Lease is the id of the replica's etcd lease.
	Lease int64 `json:"lease"`
}

// Set is this replica's membership and the kinds of work it shares. Kinds
// are added before Run; Run registers, follows the other replicas and
// claims, and hands items to the kinds' handlers until ctx ends.
type Set struct {
	opts    Options
	log     *logrus.Entry
	started time.Time
	ttl     int // seconds
	ready   chan struct{}
	once    sync.Once
	owned   *prometheus.GaugeVec
	moves   *prometheus.CounterVec

	mu      sync.Mutex
	kinds   map[string]*Kind
	running bool
	members map[string]Member
	ids     []string // sorted ids of members
	lease   clientv3.LeaseID
	sess    *concurrency.Session // the registered session, nil while there is none
	// following is the session whose members and claims the follower
	// follows: each listing registers work on it.
	following *concurrency.Session
	follower  *etcdwatch.Follower
}

// New returns a Set; Run starts it.
func New(opts Options) (*Set, error) {
	if opts.Client == nil || opts.ID == "" {
		return nil, errors.New("ownership: Client and ID are required")
	}
	if strings.Contains(opts.ID, "/") {
		return nil, fmt.Errorf("ownership: replica id %q contains '/'", opts.ID)
	}
	opts.Prefix = etcdstore.Prefix(opts.Prefix)
	if opts.TTL == 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.TTL < 0 {
		return nil, errors.New("ownership: the lease TTL cannot be negative")
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Set{opts: opts, log: opts.Logger, started: opts.Now().UTC(), ttl: int(math.Ceil(opts.TTL.Seconds())),
		ready: make(chan struct{}), kinds: map[string]*Kind{}, members: map[string]Member{},
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "argus", Subsystem: "ownership", Name: "owned_items",
			Help: "Work items this replica owns now, by kind."}, []string{"kind"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "argus", Subsystem: "ownership", Name: "handovers_total",
			Help: "Work items this replica acquired or released, by kind and direction."}, []string{"kind", "direction"}),
	}
	var err error
	s.follower, err = etcdwatch.New(etcdwatch.Options{Client: opts.Client, Prefixes: []string{s.replicasPrefix(), s.ownersPrefix()},
		Apply: s.apply, Name: "replicas and claims", Logger: s.log,
		Retry: backoff.Backoff{Base: time.Second, Max: time.Second}})
	if err != nil {
		return nil, err
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.owned, s.moves} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("ownership: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Ready is closed once this replica is registered and knows the others.
func (s *Set) Ready() <-chan struct{} { return s.ready }

// Lease is the lease this replica holds its claims on; 0 while it is not
// registered. Keys put on it vanish when the replica dies.
func (s *Set) Lease() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// Lock takes the lock called name, shared by every replica (an etcd
// concurrency.Mutex on this replica's session, so a replica that dies
// holding it lets it go within the TTL), and returns its release. It
// serialises what the owner of an item cannot: requests that any replica
// may take, such as two updates of one deployment through two replicas.
// The mutex's key is this replica's lease, so goroutines of one process
// must take a process-local lock of the same name first.
func (s *Set) Lock(ctx context.Context, name string) (func(), error) {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return nil, errors.New("ownership: this replica is not registered")
	}
	// Escaped: no name's prefix range may hold another name's keys.
	m := concurrency.NewMutex(sess, s.opts.Prefix+"/locks/"+url.PathEscape(name)+"/")
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("ownership: lock %s: %w", name, err)
	}
	return func() {
		// The key goes with the lease anyway; an unanswered etcd must not
		// hold the caller.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := m.Unlock(uctx); err != nil {
			s.log.WithError(err).WithField("lock", name).Warn("cannot release a lock; it goes with the lease")
		}
	}, nil
}

func (s *Set) replicasPrefix() string { return s.opts.Prefix + "/replicas/" }
func (s *Set) ownersPrefix() string   { return s.opts.Prefix + "/owners/" }

// Kind adds a kind of work, handled by h and by whatever handlers are
// attached with Kind.Handle before Run (h may be nil). It panics once Run
// has started: kinds are part of the assembly, not of the running state.
func (s *Set) Kind(name string, h Handler) *Kind {
	if name == "" || strings.Contains(name, "/") {
		panic(fmt.Sprintf("ownership: bad kind name %q", name))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		panic("ownership: Kind after Run")
	}
	if _, dup := s.kinds[name]; dup {
		panic("ownership: kind " + name + " added twice")
	}
	k := newKind(s, name)
	if h != nil {
		k.h = append(k.h, h)
	}
	s.kinds[name] = k
	return k
}

// view is what a worker decides with: who is alive and this replica's lease.
type view struct {
	ids   []string
	lease clientv3.LeaseID
}

func (s *Set) view() view {
	s.mu.Lock()
	defer s.mu.Unlock()
	return view{ids: s.ids, lease: s.lease}
}

// mine reports whether item is this replica's under v.
func (s *Set) mine(v view, item string) bool {
	return v.lease != 0 && slices.Contains(v.ids, s.opts.ID) && Pick(item, v.ids) == s.opts.ID
}

func (s *Set) allKinds() []*Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Kind, 0, len(s.kinds))
	for _, k := range s.kinds {
		out = append(out, k)
	}
	return out
}

// errLeaseLost ends a session whose lease expired.
var errLeaseLost = errors.New("ownership: lease lost")

// Run registers this replica and shares work until ctx ends. Then it
// releases every item (each handler's work stops) and only after that
// revokes its lease, so no item runs on two replicas even during a
// rolling restart.
func (s *Set) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("ownership: Set already running")
	}
	for _, k := range s.kinds {
		if len(k.h) == 0 {
			s.running = true // an assembly error: the Set never runs
			for _, k := range s.kinds {
				k.queue.ShutDown()
			}
			s.mu.Unlock()
			return fmt.Errorf("ownership: kind %s has no handler", k.name)
		}
	}
	s.running = true
	s.mu.Unlock()
	kinds := s.allKinds()
	var wg sync.WaitGroup
	for _, k := range kinds {
		k.run(ctx, &wg)
	}
	var sess *concurrency.Session
	defer func() {
		for _, k := range kinds {
			k.queue.ShutDown()
		}
		wg.Wait()
		for _, k := range kinds {
			k.releaseAll()
		}
		if sess != nil {
			// Revoking deletes this replica's member key and claims at
			// once: the others take over without waiting for the TTL. An
			// etcd that does not answer must not hold the shutdown: the
			// lease then expires by itself.
			sess.Orphan()
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if _, err := s.opts.Client.Revoke(rctx, sess.Lease()); err != nil {
				s.log.WithError(err).Warn("cannot revoke the replica's lease; it expires by itself")
			}
			cancel()
		}
	}()
	retry := sessionRetry()
	for ctx.Err() == nil {
		var err error
		sess, err = s.newSession(ctx)
		if err != nil {
			s.log.WithError(err).Warn("cannot open an etcd session; retrying")
			if !retry.Wait(ctx) {
				return nil
			}
			continue
		}
		err = s.serve(ctx, sess)
		s.setSession(nil)
		s.enqueueAll() // workers release what the old lease held
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errLeaseLost) {
			s.log.Error("the replica's lease expired (etcd unreachable for a whole TTL?): its work was released; registering again")
			sess = nil
			retry.Reset()
			continue
		}
		s.log.WithError(err).Warn("ownership session ended; starting a new one")
		_ = sess.Close()
		sess = nil
		if !retry.Wait(ctx) {
			return nil
		}
	}
	return nil
}

// newSession grants a lease (bounded in time: etcd may be down) and keeps
// it alive. The session outlives ctx: its lease must stay until every item
// is released, and Close revokes it.
func (s *Set) newSession(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g, err := s.opts.Client.Grant(gctx, int64(s.ttl))
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	sess, err := concurrency.NewSession(s.opts.Client, concurrency.WithLease(g.ID), concurrency.WithTTL(s.ttl),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		_, _ = s.opts.Client.Revoke(gctx, g.ID)
		return nil, err
	}
	return sess, nil
}

// sessionRetry times the attempts to open a session: 0.5 s more each
// time, up to 5 s.
func sessionRetry() backoff.Backoff {
	return backoff.Backoff{Base: 500 * time.Millisecond, Step: 500 * time.Millisecond, Max: 5 * time.Second}
}

// setSession records the session this replica is registered on (nil:
// none).
func (s *Set) setSession(sess *concurrency.Session) {
	s.mu.Lock()
	s.sess, s.lease = sess, 0
	if sess != nil {
		s.lease = sess.Lease()
	}
	s.mu.Unlock()
}

// serve registers on sess and follows members and claims until ctx ends
// or the lease is lost. The follower lists again after a broken watch and
// hands over only what changed meanwhile, so a member or claim deleted
// during the gap is seen deleted; each listing (re)starts the work on
// this session.
func (s *Set) serve(ctx context.Context, sess *concurrency.Session) error {
	if err := s.register(ctx, sess); err != nil {
		return err
	}
	s.mu.Lock()
	s.following = sess
	s.mu.Unlock()
	fctx, cancel := s.whileLeased(ctx, sess)
	s.follower.Run(fctx)
	cancel()
	select {
	case <-sess.Done():
		if ctx.Err() == nil {
			return errLeaseLost
		}
	default:
	}
	return nil
}

// register puts this replica's member key on the session's lease. A key
// of the same id on another live lease is another process (or this one's
// predecessor, killed less than a TTL ago): wait for it to go.
func (s *Set) register(ctx context.Context, sess *concurrency.Session) error {
	key := s.replicasPrefix() + s.opts.ID
	val, err := json.Marshal(Member{ID: s.opts.ID, URL: s.opts.URL, Started: s.started, Lease: int64(sess.Lease())})
	if err != nil {
		return err
	}
	for warned := false; ; {
		rctx, cancel := s.request(ctx, sess)
		resp, err := s.opts.Client.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(sess.Lease()))).Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			select {
			case <-sess.Done():
				return errLeaseLost
			default:
			}
			return fmt.Errorf("register replica %s: %w", s.opts.ID, err)
		}
		if resp.Succeeded {
			s.log.WithFields(logrus.Fields{"replica": s.opts.ID, "lease": fmt.Sprintf("%x", sess.Lease()), "ttl_s": s.ttl}).Info("replica registered")
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // gone meanwhile
		}
		if clientv3.LeaseID(kvs[0].Lease) == sess.Lease() {
			return nil
		}
		if !warned {
			warned = true
			s.log.WithField("replica", s.opts.ID).Warn("a live lease holds this replica id (another process, or this one's predecessor killed less than a TTL ago); waiting for it to go")
		}
		wctx, cancel := s.whileLeased(ctx, sess)
		_ = etcdwatch.WaitChange(wctx, s.opts.Client, kvs[0].ModRevision, false, key) // then look again
		cancel()
		select {
		case <-sess.Done():
			return errLeaseLost
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// requestTimeout bounds each etcd request ownership makes: the client
// retries some requests for as long as their context lives, and a replica
// cut off from etcd must notice that its lease is gone.
const requestTimeout = 5 * time.Second

// request is a context for one etcd request: it ends after requestTimeout
// or when the session's lease is lost.
func (s *Set) request(ctx context.Context, sess *concurrency.Session) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	return s.until(rctx, cancel, sess)
}

// whileLeased is a context that ends with ctx or when the session's lease
// is lost.
func (s *Set) whileLeased(ctx context.Context, sess *concurrency.Session) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithCancel(ctx)
	return s.until(lctx, cancel, sess)
}

// until cancels ctx when the session's lease is lost; the goroutine ends
// with ctx.
func (s *Set) until(ctx context.Context, cancel context.CancelFunc, sess *concurrency.Session) (context.Context, context.CancelFunc) {
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// apply applies member and claim changes; a listing's batch then
// (re)starts the work on the session being followed.
func (s *Set) apply(b etcdwatch.Batch) {
	s.mu.Lock()
	next := maps.Clone(s.members)
	s.mu.Unlock()
	membersChanged := false
	for _, ev := range b.Events {
		if id, ok := strings.CutPrefix(ev.Key, s.replicasPrefix()); ok {
			membersChanged = true
			if ev.Deleted {
				delete(next, id)
			} else if m, ok := s.parseMember(ev.Key, ev.Value); ok {
				next[m.ID] = m
			}
			continue
		}
		kind, item, ok := s.parseClaim(ev.Key)
		if !ok {
			continue
		}
		s.mu.Lock()
		k := s.kinds[kind]
		s.mu.Unlock()
		if k != nil {
			k.claimChanged(item, string(ev.Value), ev.Deleted)
		}
	}
	if membersChanged {
		s.setMembers(next)
	}
	if b.Listed {
		s.mu.Lock()
		sess := s.following
		s.mu.Unlock()
		s.setSession(sess)
		s.once.Do(func() { close(s.ready) })
		s.enqueueAll()
	} else if membersChanged {
		s.enqueueAll()
	}
}

func (s *Set) parseMember(key string, value []byte) (Member, bool) {
	var m Member
	if err := json.Unmarshal(value, &m); err != nil || m.ID == "" {
		s.log.WithField("key", key).Warn("skipping a malformed replica record")
		return m, false
	}
	return m, true
}

func (s *Set) parseClaim(key string) (kind, item string, ok bool) {
	rest, ok := strings.CutPrefix(key, s.ownersPrefix())
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

func (s *Set) setMembers(members map[string]Member) {
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s.mu.Lock()
	changed := !slices.Equal(ids, s.ids)
	s.members, s.ids = members, ids
	s.mu.Unlock()
	if changed {
		s.log.WithField("replicas", strings.Join(ids, ",")).Info("replica set changed")
	}
}

func (s *Set) enqueueAll() {
	for _, k := range s.allKinds() {
		k.enqueueAll()
	}
}

// Members lists the live replicas as etcd has them now, by id, each with
// when its lease expires (zero if unknown).
func (s *Set) Members(ctx context.Context) ([]MemberState, error) {
	resp, err := s.opts.Client.Get(ctx, s.replicasPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	out := make([]MemberState, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, ok := s.parseMember(string(kv.Key), kv.Value)
		if !ok {
			continue
		}
		st := MemberState{Member: m}
		if ttl, err := s.opts.Client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
			st.LeaseExpires = s.opts.Now().UTC().Add(time.Duration(ttl.TTL) * time.Second)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Others reports whether a replica other than this one (by id) is
// registered now.
func (s *Set) Others(ctx context.Context) (bool, error) {
	resp, err := s.opts.Client.Get(ctx, s.replicasPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("list replicas: %w", err)
	}
	for _, kv := range resp.Kvs {
		if strings.TrimPrefix(string(kv.Key), s.replicasPrefix()) != s.opts.ID {
			return true, nil
		}
	}
	return false, nil
}

// MemberState is a member with its lease's expiry.
type MemberState struct {
	Member
	LeaseExpires time.Time
}

// Claims returns, for one kind, each claimed item's holder as etcd has
// them now.
func (s *Set) Claims(ctx context.Context, kind string) (map[string]string, error) {
	prefix := s.ownersPrefix() + kind + "/"
	resp, err := s.opts.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %s claims: %w", kind, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = string(kv.Value)
	}
	return out, nil
}
