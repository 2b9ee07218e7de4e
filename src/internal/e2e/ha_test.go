package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// haSet is scripts/ha-up.sh run by a test (testenv.HA, stopped at
// cleanup) and its replicas as the tests call them.
type haSet struct {
	*testenv.HA
	t        testing.TB
	dir      string
	replicas []*haReplica
}

// haReplica is one orchestrator replica of a haSet.
type haReplica struct {
	*orch
	id  string
	pid int
}

// startHA runs scripts/ha-up.sh with n replicas and the given orchestrator
// flags, and returns once DIR/ready exists.
func startHA(t testing.TB, n int, flags ...string) *haSet {
	t.Helper()
	ha := testenv.StartHA(t, testenv.HAOptions{Replicas: n, Flags: flags})
	h := &haSet{HA: ha, t: t, dir: ha.Dir}
	for i, r := range ha.Replicas {
		h.replicas = append(h.replicas, &haReplica{orch: &orch{t: t, base: r.URL}, id: fmt.Sprintf("r%d", i+1), pid: r.PID})
	}
	return h
}

func (h *haSet) output() string { return h.Output() }

// log tails a replica's log, for failures.
func (h *haSet) log(id string) string {
	b, _ := os.ReadFile(filepath.Join(h.dir, "logs", "orch"+strings.TrimPrefix(id, "r")+".log"))
	return string(b[max(0, len(b)-3000):])
}

// replicaSet reads GET /v2/system/replicas through a replica.
func (r *haReplica) replicaSet() []api.Replica {
	r.t.Helper()
	var out struct {
		Replicas []api.Replica `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(r.must(200, "GET", "/v2/system/replicas", nil)), &out); err != nil {
		r.t.Fatal(err)
	}
	return out.Replicas
}

// owners maps each item of a kind to the replicas that claim it.
func owners(set []api.Replica, items func(api.Replica) []string) map[string][]string {
	out := map[string][]string{}
	for _, r := range set {
		for _, item := range items(r) {
			out[item] = append(out[item], r.ID)
		}
	}
	return out
}

func allApplied(r status.Response) (bool, string) { return appliedAs("Instantiated")(r) }

// appliedAs: every resource but the pods Applied, the DIG's status st.
func appliedAs(st string) func(status.Response) (bool, string) {
	return func(r status.Response) (bool, string) {
		n := 0
		for k, res := range resources(r) {
			if k.kind == "Pod" {
				continue
			}
			n++
			if res.RsyncStatus != "Applied" {
				return false, fmt.Sprintf("%v %s", k, res.RsyncStatus)
			}
		}
		return n > 0 && r.Status == st, fmt.Sprintf("status %s, %d resources", r.Status, n)
	}
}

// seqs are the sequence numbers delivered, in order.
func seqs(h *hook) []int64 {
	posts, _ := h.snapshot()
	out := make([]int64, 0, len(posts))
	for _, p := range posts {
		out = append(out, p.seq)
	}
	return out
}

// contiguous reports whether delivered sequence numbers run 1, 2, 3 …
// with no gap; repeats (a failover's resend) are allowed.
func contiguous(l []int64) bool {
	s := slices.Clone(l)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	s = slices.Compact(s)
	for i, v := range s {
		if v != int64(i+1) {
			return false
		}
	}
	return true
}

// TestHAReplicas is issue 19's acceptance: three replicas brought up by
// scripts/ha-up.sh on a three-member etcd cluster and a standalone
// FerretDB share the work; a DIG onboarded through one is Applied as every
// other sees it; each cluster is watched by one replica; a subscription
// made through another gets each change once; and when the replica that
// delivers it is killed, a survivor delivers the next change, with
// contiguous sequence numbers, and takes its clusters over. Then two
// updates taken at once by two replicas run one after the other, each with
// a revision of its own, and a rollback through one is applied
// (haDayTwo).
func TestHAReplicas(t *testing.T) {
	alone(t)
	startMonitors(t, sim)
	h := startHA(t, 3, "--callback-allow", "127.0.0.1", "--lease-ttl", "5s", "--etcd-prefix", haPrefix)
	r1, r2, r3 := h.replicas[0], h.replicas[1], h.replicas[2]

	onboard(t, r1.orch, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	r1.must(202, "POST", digPath+"/approve", nil)
	r1.must(202, "POST", digPath+"/instantiate", nil)
	survivor := r3 // a replica that is never killed, to clean up through
	defer func() {
		survivor.must(202, "POST", digPath+"/terminate", nil)
		survivor.waitStatus("type=rsync", "terminated", func(r status.Response) (bool, string) { return r.Status == "Terminated", r.Status })
	}()
	for _, r := range []*haReplica{r2, r3} {
		took := r.waitStatus("type=rsync", "every resource Applied as "+r.id+" sees it", allApplied)
		t.Logf("instantiated through r1, Applied as %s sees it after %s", r.id, took.Round(time.Millisecond))
	}
	r2.waitStatus("type=cluster", "every resource ready as r2 sees it", everythingReady)

	set := r2.replicaSet()
	clusters := owners(set, func(r api.Replica) []string { return r.Clusters })
	for _, c := range sim.Clusters {
		if l := clusters["cp+"+c.Name]; len(l) != 1 {
			t.Fatalf("cluster %s is owned by %v, want exactly one replica; replicas: %+v", c.Name, l, set)
		}
	}
	if digs := owners(set, func(r api.Replica) []string { return r.DIGs }); len(digs["p1/ca/v1/dig1"]) != 1 {
		t.Fatalf("the DIG is owned by %v", digs["p1/ca/v1/dig1"])
	}
	t.Logf("clusters owned: %v", clusters)

	hk := newHook(t, "ok")
	subs := digPath + "/status/subscriptions"
	r2.must(201, "POST", subs, map[string]any{"name": "ha", "callback-url": hk.url(), "min-notify-interval": 0})
	scale(t, "cluster1", "default", "frontend", 3)
	hk.waitPost(0, "creating the third pod", func(p post) bool { return entry(p.doc.Changes.Created, "Pod", "cluster1", "frontend") != nil })
	got := seqs(hk)
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !contiguous(got) || len(slices.Compact(sorted)) != len(got) {
		t.Fatalf("sequence numbers %v: want 1, 2, 3 … without repeats", got)
	}
	t.Logf("before the failover: sequence numbers %v", got)

	const subKey = "dig/p1/ca/v1/dig1/ha"
	subOwner := owners(r1.replicaSet(), func(r api.Replica) []string { return r.Subscriptions })[subKey]
	if len(subOwner) != 1 {
		t.Fatalf("the subscription is owned by %v", subOwner)
	}
	var victim *haReplica
	var rest []*haReplica
	for _, r := range h.replicas {
		if r.id == subOwner[0] {
			victim = r
		} else {
			rest = append(rest, r)
		}
	}
	survivor = rest[0]
	victimClusters := owners(survivor.replicaSet(), func(r api.Replica) []string { return r.Clusters })
	n := len(mustPosts(hk))
	killed := time.Now()
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (pid %d), which delivered the subscription and owned clusters %v", victim.id, victim.pid, victimClusters)
	changed := scale(t, "cluster2", "default", "frontend", 3)
	// Target ≤ 30 s (issue 19; ~5 s, the lease TTL, in docs/benchmarks.md),
	// asserted at 60 s: on 2 shared cores under -race the survivors lag.
	p := hk.waitPostFor(90*time.Second, n, "after the owner was killed", func(p post) bool {
		return entry(p.doc.Changes.Created, "Pod", "cluster2", "frontend") != nil
	})
	failover := p.at.Sub(killed)
	t.Logf("failover: kill -9 → next callback %s (change made %s after the kill; lease TTL 5s; target 30s, fails over 60s)",
		failover.Round(time.Millisecond), changed.Sub(killed).Round(time.Millisecond))
	if failover > 60*time.Second {
		t.Errorf("the callback came %s after the kill, want within 30s (fails over 60s)", failover)
	}
	if got := seqs(hk); !contiguous(got) {
		t.Fatalf("sequence numbers across the failover %v: a gap", got)
	} else {
		t.Logf("sequence numbers across the failover: %v", got)
	}

	waitTakeover(t, survivor, victim, killed)
	// The status is still answered, and still follows the clusters, on
	// every survivor.
	for _, r := range rest {
		r.waitStatus("type=cluster", "cluster2's third pod seen by "+r.id, func(s status.Response) (bool, string) {
			return countPrefix(podSet(s), "cluster2/frontend") == 3, fmt.Sprint(podSet(s))
		})
	}
	scale(t, "cluster1", "default", "frontend", 2)
	scale(t, "cluster2", "default", "frontend", 2)

	haDayTwo(t, h, rest)
	if t.Failed() {
		t.Logf("log of %s: %s", survivor.id, h.log(survivor.id))
	}
}

// waitTakeover waits until the survivors own every cluster and the victim
// is gone from the replica set, as survivor sees them.
func waitTakeover(t *testing.T, survivor, victim *haReplica, killed time.Time) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		set := survivor.replicaSet()
		var ids []string
		for _, r := range set {
			ids = append(ids, r.ID)
		}
		clusters := owners(set, func(r api.Replica) []string { return r.Clusters })
		ok := !slices.Contains(ids, victim.id)
		for _, c := range sim.Clusters {
			l := clusters["cp+"+c.Name]
			ok = ok && len(l) == 1 && l[0] != victim.id
		}
		if ok {
			t.Logf("after %s the survivors %v own the clusters: %v", time.Since(killed).Round(time.Millisecond), ids, clusters)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead replica's clusters were not taken over: %+v", set)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
}

// haPrefix is the HA replicas' etcd prefix, named so the test can find
// their locks and revisions.
const haPrefix = "/argus-ha"

// etcd returns a client of the set's etcd cluster, closed at cleanup.
func (h *haSet) etcd() *clientv3.Client {
	h.t.Helper()
	m := regexp.MustCompile(`etcd cluster up: (\S+)`).FindStringSubmatch(h.output())
	if m == nil {
		h.t.Fatalf("no etcd endpoints in ha-up.sh's output: %s", h.output())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(m[1], ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// haDayTwo: two updates of the DIG taken at once by two replicas run one
// after the other under the DIG's etcd lock, each rendering the DIG as it
// is when it gets the lock, each with a revision of its own; a rollback
// through one replica restores revision 1's content, applied by the
// group's owner as both see it.
//
// The test takes the same lock to make the serialisation observable: it
// holds it while both updates queue behind it (neither may answer), and
// queues itself between them to change the DIG, so the first update must
// render replicaCount 3 and the second replicaCount 1. Without the lock
// both would run at once, before either change.
func haDayTwo(t *testing.T, h *haSet, rest []*haReplica) {
	cli := h.etcd()
	q := newDIGLockQueue(t, cli, catalog.DIGGroup(catalog.Key{"p1", "ca", "v1", "dig1"}))
	setReplicas := func(n string) {
		rest[0].must(200, "PUT", caPath+"/deployment-intent-groups/dig1", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1",
			"overrideValues": []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": n}}}}))
	}

	first, held := q.take()
	<-held
	setReplicas("3")
	u1 := updateAsync(rest[0])
	q.waiting(2, "the first update waiting for the lock")
	second, heldAgain := q.take()
	q.waiting(3, "the test queued behind it")
	u2 := updateAsync(rest[1])
	q.waiting(4, "the second update waiting behind the test")
	noAnswer(t, "while the test held the DIG's lock", u1, u2)
	q.release(first)
	rev1 := (<-u1).revision(t)
	<-heldAgain
	noAnswer(t, "while the test held the DIG's lock again", u2)
	setReplicas("1")
	q.release(second)
	rev2 := (<-u2).revision(t)
	if rev1 != 2 || rev2 != 3 {
		t.Fatalf("two updates one after the other through two replicas made revisions %d and %d, want 2 and 3", rev1, rev2)
	}
	contexts := appcontext.New(appcontext.Options{Client: cli, Prefix: haPrefix})
	id := haContextID(t, cli)
	for n, want := range map[int64]int64{2: 3, 3: 1} {
		if got := revisionReplicas(t, contexts, id, n); got != want {
			t.Fatalf("revision %d renders %d frontend replicas, want %d", n, got, want)
		}
	}
	waitDeployments(t, "frontend", 1, "the second update applied")

	rest[1].must(202, "POST", digPath+"/rollback", map[string]any{"spec": map[string]any{"revision": "1"}})
	// The replica that took the rollback first: its cache has the rollback
	// (read-your-writes), so only the owner's apply satisfies the check.
	for _, r := range []*haReplica{rest[1], rest[0]} {
		took := r.waitStatus("type=rsync", "rolled back, every resource Applied as "+r.id+" sees it", appliedAs("Updated"))
		t.Logf("updates through %s and %s, rollback through %s: Applied as %s sees it after %s",
			rest[0].id, rest[1].id, rest[1].id, r.id, took.Round(time.Millisecond))
	}
	waitDeployments(t, "frontend", 2, "revision 1's replica count back on every cluster")
	if got := revisionReplicas(t, contexts, id, 4); got != 2 {
		t.Fatalf("the rollback's revision renders %d frontend replicas, want revision 1's 2", got)
	}
	if got := rest[0].lastRevision(digPath); got != 4 {
		t.Fatalf("revision after the rollback = %d, want 4", got)
	}
}

// digLockQueue takes a group's etcd lock as the replicas do
// (ownership.Set.Lock), so a test can hold it and see who waits for it.
type digLockQueue struct {
	t      *testing.T
	ctx    context.Context
	cli    *clientv3.Client
	prefix string
}

func newDIGLockQueue(t *testing.T, cli *clientv3.Client, group string) *digLockQueue {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a lock still wanted when the test fails
	return &digLockQueue{t: t, ctx: ctx, cli: cli, prefix: haPrefix + "/locks/" + url.PathEscape(group) + "/"}
}

// take queues for the lock on a session of its own; held closes once the
// lock is the test's.
func (q *digLockQueue) take() (m *concurrency.Mutex, held <-chan struct{}) {
	sess, err := concurrency.NewSession(q.cli, concurrency.WithTTL(30))
	if err != nil {
		q.t.Fatal(err)
	}
	q.t.Cleanup(func() { _ = sess.Close() })
	m, ch := concurrency.NewMutex(sess, q.prefix), make(chan struct{})
	go func() {
		if m.Lock(q.ctx) == nil {
			close(ch)
		}
	}()
	return m, ch
}

func (q *digLockQueue) release(m *concurrency.Mutex) {
	if err := m.Unlock(q.ctx); err != nil {
		q.t.Fatal(err)
	}
}

// waiting waits until n holders and waiters are queued for the lock.
func (q *digLockQueue) waiting(n int64, what string) {
	waitFor(q.t, what, func() (bool, string) {
		r, err := q.cli.Get(q.ctx, q.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count == n, fmt.Sprintf("%v waiting or holding, %v", r, err)
	})
}

type updateAnswer struct {
	code int
	body string
}

// updateAsync asks r to update the DIG and delivers its answer.
func updateAsync(r *haReplica) <-chan updateAnswer {
	ch := make(chan updateAnswer, 1)
	go func() { // not r.call: a failed call must not end this goroutine unanswered
		resp, err := boundedClient().Post(r.base+digPath+"/update", "application/json", nil)
		if err != nil {
			ch <- updateAnswer{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		ch <- updateAnswer{resp.StatusCode, string(body)}
	}()
	return ch
}

func (a updateAnswer) revision(t *testing.T) int64 {
	t.Helper()
	rev, err := strconv.ParseInt(strings.TrimSpace(a.body), 10, 64)
	if a.code != 202 || err != nil {
		t.Fatalf("update: %d %q, want 202 with a revision", a.code, a.body)
	}
	return rev
}

// noAnswer fails the test if any of the updates has answered.
func noAnswer(t *testing.T, when string, updates ...<-chan updateAnswer) {
	t.Helper()
	for _, u := range updates {
		select {
		case a := <-u:
			t.Fatalf("an update answered (%d %s) %s", a.code, a.body, when)
		default:
		}
	}
}

// haContextID is the id of the one context the HA set's revisions are of.
func haContextID(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	r, err := cli.Get(context.Background(), haPrefix+"/revision/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(r.Kvs) == 0 {
		t.Fatalf("no revisions under %s/revision/: %v", haPrefix, err)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(string(r.Kvs[0].Key), haPrefix+"/revision/"), "/")
	return id
}

// revisionReplicas is the frontend Deployment's spec.replicas in revision
// n of context id (the same on every cluster, or the test fails).
func revisionReplicas(t *testing.T, contexts *appcontext.Store, id string, n int64) int64 {
	t.Helper()
	rev, err := contexts.Revision(context.Background(), id, n)
	if err != nil {
		t.Fatalf("revision %d: %v", n, err)
	}
	var got []int64
	for _, p := range rev.Placements {
		for _, r := range p.Resources {
			if r.GVK.Kind != "Deployment" || p.App != "frontend" {
				continue
			}
			var d struct {
				Spec struct {
					Replicas int64 `json:"replicas"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(r.Manifest, &d); err != nil {
				t.Fatalf("revision %d: %v", n, err)
			}
			got = append(got, d.Spec.Replicas)
		}
	}
	if len(got) != len(sim.Clusters) || slices.Min(got) != slices.Max(got) {
		t.Fatalf("revision %d: frontend Deployments with replicas %v, want one per cluster, all alike", n, got)
	}
	return got[0]
}

// waitDeployments waits until the Deployment name in default has spec.replicas
// n on every cluster.
func waitDeployments(t *testing.T, name string, n int32, what string) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		var got []string
		ok := true
		for _, c := range sim.Clusters {
			d, err := c.Clientset().AppsV1().Deployments("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ok = ok && d.Spec.Replicas != nil && *d.Spec.Replicas == n
			got = append(got, fmt.Sprintf("%s: %v", c.Name, *d.Spec.Replicas))
		}
		return ok, strings.Join(got, ", ")
	})
}
