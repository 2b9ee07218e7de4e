package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/agent"
	"github.com/argus-mc/argus/src/internal/fleet/join"
	"github.com/argus-mc/argus/src/internal/rsync"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

// fixture is a hub on the test's etcd prefix, served on a loopback port.
type fixture struct {
	prefix string
	store  *appcontext.Store
	join   *join.Service
	hub    *Hub
	addr   string
}

// runFor runs f until the test ends.
func runFor(t testing.TB, f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func newFixture(t testing.TB, adjust ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{prefix: env.EtcdPrefix()}
	f.store = appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: f.prefix})
	cache := appcontext.NewCache(f.store, nil)
	var err error
	forget := func(ref appcontext.ClusterRef) []clientv3.Op {
		return ForgetOps(f.prefix, f.store.ClusterStateKey(ref), ref)
	}
	if f.join, err = join.New(join.Options{Client: env.Etcd.Client, Prefix: f.prefix, Forget: forget}); err != nil {
		t.Fatal(err)
	}
	opts := Options{Client: env.Etcd.Client, Contexts: f.store, Observed: cache, Credentials: f.join, Prefix: f.prefix,
		Replica: "r1", UnreachableAfter: 300 * time.Millisecond, Heartbeat: time.Second}
	for _, a := range adjust {
		a(&opts)
	}
	if f.hub, err = New(opts); err != nil {
		t.Fatal(err)
	}
	runFor(t, cache.Run)
	runFor(t, f.join.Run)
	runFor(t, f.hub.Run)
	<-f.join.Ready()
	<-f.hub.Started()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Short request timeouts, as the API's are (a minute or two there): a
	// stream must outlive them.
	srv := &http.Server{Handler: f.hub.Handler(http.NotFoundHandler()), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { f.hub.Stop(); _ = srv.Close(); <-served }) // runs before the hub's Run ends
	f.addr = ln.Addr().String()
	return f
}

// joined registers ref and exchanges its token, as an agent would.
func (f *fixture) joined(t *testing.T, ref appcontext.ClusterRef) *memCredentials {
	t.Helper()
	tok, err := f.join.Register(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.join.Exchange(t.Context(), tok.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the credential known", func() bool { _, _, err := f.join.Authenticate(c.Credential); return err == nil })
	return &memCredentials{c: &agent.Credential{Cluster: c.Cluster, Credential: c.Credential}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not true after 30s", what)
}

type memCredentials struct{ c *agent.Credential }

func (m *memCredentials) Load(context.Context) (*agent.Credential, error) { return m.c, nil }
func (m *memCredentials) Save(_ context.Context, c agent.Credential) error {
	m.c = &c
	return nil
}

// memCluster is an agent's Kubernetes side in memory: every placement is
// Applied (or Deleted) at once.
type memCluster struct {
	mu        sync.Mutex
	r         agent.Reporter
	ready     chan struct{}
	applied   []agent.Work
	forgotten []agent.WorkKey
}

func newMemCluster() *memCluster { return &memCluster{ready: make(chan struct{})} }

func (m *memCluster) Run(ctx context.Context, r agent.Reporter) error {
	m.r = r
	close(m.ready)
	<-ctx.Done()
	return nil
}

func (m *memCluster) Apply(w agent.Work) {
	<-m.ready
	m.mu.Lock()
	m.applied = append(m.applied, w)
	m.mu.Unlock()
	st := map[string]appcontext.ResourceStatus{}
	for _, r := range w.Resources {
		res := appcontext.Resource{GVK: r.GVK, Name: r.Name, Namespace: r.Namespace}
		if w.Delete || r.Removed {
			st[res.Key()] = appcontext.ResourceStatus{Status: appcontext.RsyncDeleted}
		} else {
			st[res.Key()] = appcontext.ResourceStatus{Status: appcontext.RsyncApplied, Manifest: r.SHA256}
		}
	}
	m.r.Statuses(w.Key, w.Generation, st)
	m.r.Progress(w.Key, w.Generation, true, true)
}

func (m *memCluster) Forget(k agent.WorkKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgotten = append(m.forgotten, k)
}

func (m *memCluster) Monitor() (string, string) { return appcontext.MonitorRunning, "" }

func (m *memCluster) log() ([]agent.Work, []agent.WorkKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.applied), slices.Clone(m.forgotten)
}

var edge = appcontext.ClusterRef{Provider: "cp", Name: "edge01"}

func configMap(name, version string) appcontext.Resource {
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name},
		"data": map[string]any{"version": version}})
	return appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Manifest: data}
}

// newContext stores a context placing each app (one ConfigMap) on edge.
func (f *fixture) newContext(t *testing.T, apps ...string) *appcontext.Context {
	t.Helper()
	id := appcontext.NewID()
	var ps []*appcontext.Placement
	for _, a := range apps {
		ps = append(ps, &appcontext.Placement{App: a, Cluster: edge, Resources: []appcontext.Resource{configMap(a, "one")}})
	}
	meta := appcontext.Meta{ID: id, Kind: "dig", Group: "g" + id, Namespace: "default", StatusID: id, Created: time.Now()}
	if err := f.store.Create(t.Context(), meta, appcontext.Status{Status: appcontext.Instantiating}, ps); err != nil {
		t.Fatal(err)
	}
	c, err := f.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) publish(t *testing.T, c *appcontext.Context, app string) int64 {
	t.Helper()
	gen, err := f.hub.Publish(t.Context(), c, c.Placement(app, edge), rsync.WorkInstall)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

// settled waits for the agent's settled progress on generation gen.
func (f *fixture) settled(t *testing.T, id, app string, gen int64) {
	t.Helper()
	progress, stop := f.hub.Follow(id, app, edge)
	defer stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-progress:
			if p.Generation >= gen && p.Settled {
				return
			}
		case <-timeout:
			t.Fatalf("%s/%s generation %d not settled after 30s", id, app, gen)
		}
	}
}

// agentBehindProxy runs an agent on an in-memory cluster until the test
// ends, its link to the hub through a proxy the test can cut.
// runAgent runs the real agent code for creds against the hub over plain
// http until stop (which returns Run's error) or the test's end; exited
// is closed when Run returns.
func (f *fixture) runAgent(t *testing.T, creds *memCredentials) (a *agent.Agent, stop func() error, exited <-chan struct{}) {
	t.Helper()
	a, err := agent.New(agent.Options{Orchestrators: []string{"http://" + f.addr}, Cluster: newMemCluster(), Credentials: creds,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = a.Run(ctx)
	}()
	stop = func() error {
		cancel()
		<-done
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return a, stop, done
}

func (f *fixture) agentBehindProxy(t *testing.T, creds *memCredentials) (*agent.Agent, *memCluster, *testenv.Proxy) {
	t.Helper()
	proxy := testenv.NewProxy(t, f.addr)
	mem := newMemCluster()
	a, err := agent.New(agent.Options{Orchestrators: []string{"http://" + proxy.Addr()}, Cluster: mem, Credentials: creds,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, a.Run)
	return a, mem, proxy
}

// An agent that loses its link resumes from its revision: only what
// changed meanwhile reaches its cluster (an update, a forgotten
// placement), and what it reports lands in the context.
func TestAgentResumesFromItsRevision(t *testing.T) {
	f := newFixture(t)
	creds := f.joined(t, edge)
	c := f.newContext(t, "a", "b", "c")
	gens := map[string]int64{}
	for _, app := range []string{"a", "b", "c"} {
		gens[app] = f.publish(t, c, app)
	}
	a, mem, proxy := f.agentBehindProxy(t, creds)
	for app, gen := range gens {
		f.settled(t, c.Meta.ID, app, gen)
	}
	got, err := f.store.Get(t.Context(), c.Meta.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got.Placements {
		if st := p.StatusOf(configMap(p.App, "").Key()); st.Status != appcontext.RsyncApplied || st.Manifest == "" {
			t.Errorf("%s: status %+v, want Applied with its manifest", p.App, st)
		}
	}
	if applied, _ := mem.log(); len(applied) != 3 {
		t.Fatalf("%d applies, want 3", len(applied))
	}

	proxy.Cut()
	waitFor(t, "the agent disconnected", func() bool { return !a.Connected() })
	p := c.Placement("b", edge)
	p.Resources = []appcontext.Resource{configMap("b", "two")}
	if err := f.store.Replace(t.Context(), c.Meta.ID, []*appcontext.Placement{p}, nil, c.Status); err != nil {
		t.Fatal(err)
	}
	if c, err = f.store.Get(t.Context(), c.Meta.ID); err != nil {
		t.Fatal(err)
	}
	newGen := f.publish(t, c, "b")
	if err := f.hub.Forget(t.Context(), c.Meta.ID, "c", edge); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	f.settled(t, c.Meta.ID, "b", newGen)
	waitFor(t, "c forgotten", func() bool { _, forgotten := mem.log(); return len(forgotten) == 1 })
	applied, forgotten := mem.log()
	if len(applied) != 4 || applied[3].Key.App != "b" || applied[3].Generation != newGen || forgotten[0].App != "c" {
		t.Fatalf("after the reconnect: applied %v, forgotten %v; want b's new generation and c forgotten only", keysOf(applied), forgotten)
	}
}

// What an agent resends at once on a new stream (a change made while its
// link was down, or while the replica it streamed to died) is stored, not
// dropped and acknowledged: the hub reads the cluster's work, which it
// checks every report against, before it welcomes the agent.
func TestChangeResentOnReconnectIsStored(t *testing.T) {
	f := newFixture(t)
	creds := f.joined(t, edge)
	c := f.newContext(t, "a")
	gen := f.publish(t, c, "a")
	a, mem, proxy := f.agentBehindProxy(t, creds)
	f.settled(t, c.Meta.ID, "a", gen)
	bundle := func(ready bool) agent.Bundle {
		return agent.Bundle{Namespace: "default", Name: "a", StatusID: c.Meta.StatusID, App: "a", ResourceVersion: fmt.Sprint(ready),
			Status: fmt.Appendf(nil, `{"ready":%t,"resourceCount":1}`, ready)}
	}
	stored := func() string {
		snap, ok, err := f.store.Bundle(t.Context(), c.Meta.ID, "a", edge)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ""
		}
		return snap.ResourceVersion
	}
	mem.r.Bundle(bundle(true))
	waitFor(t, "the ready bundle stored", func() bool { return stored() == "true" })

	proxy.Cut()
	waitFor(t, "the agent disconnected", func() bool { return !a.Connected() })
	mem.r.Bundle(bundle(false)) // the one change: the agent has it to send on the next stream
	proxy.Heal()
	waitFor(t, "the agent connected again", a.Connected)
	waitFor(t, "the change made while the link was down stored", func() bool { return stored() == "false" })
}

func keysOf(ws []agent.Work) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s@%d", w.Key.App, w.Generation))
	}
	return out
}

// A cluster without a stream for UnreachableAfter is Unreachable (its
// agent never came, or left), and Available while one streams.
func TestClusterWithoutStreamIsUnreachable(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.LastSeenInterval = 1000 * time.Hour }) // its first write at random in it
	creds := f.joined(t, edge)
	state := func() appcontext.ClusterState {
		states, err := f.store.ClusterStates(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return states[edge]
	}
	waitFor(t, "never connected: Unreachable", func() bool { s := state(); return s.Connectivity == appcontext.Unreachable && s.Agent })
	_, stop, _ := f.runAgent(t, creds)
	waitFor(t, "connected: Available, monitor Running", func() bool {
		s := state()
		return s.Connectivity == appcontext.Available && s.Monitor == appcontext.MonitorRunning
	})
	// The stream outlives the server's read, write and idle timeouts.
	session := func() string {
		resp, err := env.Etcd.Client.Get(t.Context(), f.hub.keys.session(edge))
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	first, seen := session(), state().LastSeen
	<-time.After(2 * time.Second) // four times the timeouts
	if now := session(); now != first || first == "" {
		t.Errorf("the stream did not outlive the server's timeouts: session %q, then %q", first, now)
	}
	if now := state().LastSeen; !now.Equal(seen) {
		t.Errorf("last seen rewritten while connected (%s, then %s): the interval is 1,000 hours", seen, now)
	}
	stopped := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gone: Unreachable again", func() bool { return state().Connectivity == appcontext.Unreachable })
	// Written as the stream ended: the agent's last heartbeat (every
	// second here, for two seconds), not the connection's first report.
	if got := state().LastSeen; !got.After(seen) || got.After(time.Now()) {
		t.Errorf("last seen %s after the agent stopped at %s; it connected at %s", got, stopped, seen)
	}
}

// A cluster deleted while its agent streams loses its recorded state with
// its registration, and nothing the stream writes as it goes (its
// reports, its last-seen time at the end) brings it back.
func TestDeletedClusterStateGoes(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.LastSeenInterval = 1000 * time.Hour })
	a, _, exited := f.runAgent(t, f.joined(t, edge))
	key := f.store.ClusterStateKey(edge)
	stateRev := func() int64 {
		resp, err := env.Etcd.Client.Get(t.Context(), key)
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].ModRevision
	}
	waitFor(t, "connected", func() bool { return a.Connected() })
	waitFor(t, "its state written", func() bool { return stateRev() != 0 })
	<-time.After(1500 * time.Millisecond) // a heartbeat or more after the state's write
	if err := f.join.Revoke(t.Context(), edge); err != nil {
		t.Fatal(err)
	}
	// The state goes with the registration, at once.
	if rev := stateRev(); rev != 0 {
		t.Fatalf("the deleted cluster's state is still there (revision %d)", rev)
	}
	select {
	case <-exited: // the agent exits once its credential is refused
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop after its cluster was deleted")
	}
	waitFor(t, "the hub's session over", func() bool {
		f.hub.mu.Lock()
		defer f.hub.mu.Unlock()
		return f.hub.sessions[edge] == nil
	})
	// Nothing the stream wrote as it went (its reports, its last-seen
	// write at the end) brought it back.
	if rev := stateRev(); rev != 0 {
		t.Errorf("the deleted cluster's state was written back at revision %d", rev)
	}
	resp, err := env.Etcd.Client.Get(t.Context(), f.hub.keys.session(edge))
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the session key: %v, %v; want none", resp.Kvs, err)
	}
}

// A stream authenticated before its cluster was deleted, on a replica
// that has not heard of the deletion yet, cannot record its session (nor
// so get a write past the session's guard); neither can one whose
// cluster was registered again meanwhile.
func TestSessionNotRecordedForADeletedCluster(t *testing.T) {
	f := newFixture(t)
	f.joined(t, edge)
	_, epoch, err := f.join.Authenticate(f.joined(t, edge).c.Credential)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{h: f.hub, ref: edge, epoch: epoch, guard: "a session"}
	if err := s.recordSession(t.Context(), f.hub.leaseID()); err != nil {
		t.Fatalf("the registered cluster's session: %v", err)
	}
	if err := f.join.Revoke(t.Context(), edge); err != nil {
		t.Fatal(err)
	}
	if err := s.recordSession(t.Context(), f.hub.leaseID()); !errors.Is(err, errDeregistered) {
		t.Errorf("after the deletion: %v, want errDeregistered", err)
	}
	f.joined(t, edge) // registered again: a new epoch
	if err := s.recordSession(t.Context(), f.hub.leaseID()); !errors.Is(err, errDeregistered) {
		t.Errorf("after registering again: %v, want errDeregistered", err)
	}
	resp, err := env.Etcd.Client.Get(t.Context(), f.hub.keys.session(edge))
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the session key: %v, %v; want none", resp.Kvs, err)
	}
}

// One transaction carries several clusters' parts; a part whose guard
// fails (its session superseded) fails alone.
func TestWriterGuardsEachPart(t *testing.T) {
	prefix := env.EtcdPrefix()
	cli := env.Etcd.Client
	if _, err := cli.Put(t.Context(), prefix+"guard/a", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), prefix+"guard/b", "s2"); err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(cli, m)
	ok := &part{cluster: "a", guard: clientv3.Compare(clientv3.Value(prefix+"guard/a"), "=", "s1"),
		ops: []clientv3.Op{clientv3.OpPut(prefix+"data/a", "x")}, done: make(chan error, 1)}
	stale := &part{cluster: "b", guard: clientv3.Compare(clientv3.Value(prefix+"guard/b"), "=", "old"),
		ops: []clientv3.Op{clientv3.OpPut(prefix+"data/b", "x")}, done: make(chan error, 1)}
	w.commit(t.Context(), []*part{ok, stale})
	if err := <-ok.done; err != nil {
		t.Errorf("the guarded part: %v", err)
	}
	if err := <-stale.done; err != errSuperseded {
		t.Errorf("the stale part: %v, want errSuperseded", err)
	}
	resp, err := cli.Get(t.Context(), prefix+"data/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != prefix+"data/a" {
		t.Errorf("stored %v, want data/a only", resp.Kvs)
	}
}

var _ rsync.Delegate = (*Hub)(nil)

// An install is written without reading first; over a record already
// there (a replica taking an instantiation over) it is compared as an
// update is: the same work keeps its generation, other work gets a new one.
func TestPublishInstallOverARecord(t *testing.T) {
	f := newFixture(t)
	c := f.newContext(t, "a")
	gen := f.publish(t, c, "a")
	if again := f.publish(t, c, "a"); again != gen {
		t.Fatalf("the same install again: generation %d, want %d kept", again, gen)
	}
	c.Meta.Namespace = "other"
	if changed := f.publish(t, c, "a"); changed <= gen {
		t.Fatalf("another install over the record: generation %d, want more than %d", changed, gen)
	}
}

// A session written again on a new lease (the old lease's keys went with
// it) does not overwrite a newer session of the cluster recorded
// meanwhile, e.g. on another replica.
func TestRerecordedSessionYieldsToANewerOne(t *testing.T) {
	f := newFixture(t)
	cred := f.joined(t, edge).c.Credential
	_, epoch, err := f.join.Authenticate(cred)
	if err != nil {
		t.Fatal(err)
	}
	key := f.hub.keys.session(edge)
	older := &session{h: f.hub, ref: edge, cred: cred, epoch: epoch, guard: "older"}
	newer := &session{h: f.hub, ref: edge, cred: cred, epoch: epoch, guard: "newer"}
	if err := older.recordSession(t.Context(), f.hub.leaseID()); err != nil {
		t.Fatal(err)
	}
	if err := older.rerecordSession(t.Context(), f.hub.leaseID()); err != nil {
		t.Errorf("its own key: %v", err)
	}
	if _, err := env.Etcd.Client.Delete(t.Context(), key); err != nil { // as a lost lease does
		t.Fatal(err)
	}
	if err := older.rerecordSession(t.Context(), f.hub.leaseID()); err != nil {
		t.Errorf("its key gone with the lease: %v", err)
	}
	if err := newer.recordSession(t.Context(), f.hub.leaseID()); err != nil {
		t.Fatal(err)
	}
	if err := older.rerecordSession(t.Context(), f.hub.leaseID()); !errors.Is(err, errSuperseded) {
		t.Errorf("after a newer session: %v, want errSuperseded", err)
	}
	resp, err := env.Etcd.Client.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "newer" {
		t.Errorf("the session key: %v, %v; want the newer session's", resp.Kvs, err)
	}
}
