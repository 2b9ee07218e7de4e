package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// The chaos tests inject an operator's bad day into one scripts/ha-up.sh
// stack (three replicas, lease TTL 5 s, a three-member etcd, FerretDB)
// over the package's two clusters: the owner of a DIG paused mid-apply,
// the watcher of a cluster killed during a burst of deletions, the etcd
// leader killed, the MongoDB-wire store stopped. Each checks the
// clusters' objects and the callbacks' content and sequence.
//
// In CI each runs once; ARGUS_CHAOS_RUNS=5 repeats the first two (the
// acceptance runs of issue 27), ARGUS_CHAOS_PAUSE sets the pause
// (default 10s; the scenario is 15s) and ARGUS_CHAOS_OUTAGE
// FerretDB's (default 10s, above the lease TTL and the store's heartbeat
// timeouts; the scenario is 20s).

const (
	chaosCA      = "/v2/projects/chaos/composite-apps/ca/v1"
	chaosDIG     = chaosCA + "/deployment-intent-groups/dig"
	chaosDIGKey  = "chaos/ca/v1/dig"
	chaosSubKey  = "dig/chaos/ca/v1/dig/chaos"
	chaosApp     = "manycm"
	chaosPerCl   = 220 // ConfigMaps per cluster: 200 are deleted at once
	chaosTTL     = 5 * time.Second
	chaosCluster = "cluster1"
)

// chaos is the stack the chaos tests share.
type chaos struct {
	t      *testing.T
	h      *haSet
	stores map[string]testenv.HAStore
	etcd   *clientv3.Client
	hook   *hook
	rev    int

	mu        sync.Mutex
	down      map[string]bool // replicas killed or paused
	paused    map[int]bool    // processes stopped (SIGSTOP) and not resumed
	restarted []*testenv.Proc
}

func TestHAChaos(t *testing.T) {
	alone(t)
	startMonitors(t, sim)
	c := newChaos(t)
	runs := 1
	if v := os.Getenv("ARGUS_CHAOS_RUNS"); v != "" {
		runs, _ = strconv.Atoi(v)
	}
	pause := 10 * time.Second
	if v := os.Getenv("ARGUS_CHAOS_PAUSE"); v != "" {
		pause, _ = time.ParseDuration(v)
	}
	for i := 1; i <= runs; i++ {
		if !t.Run(fmt.Sprintf("paused owner mid-apply/%d", i), func(t *testing.T) { c.pausedOwner(t, pause) }) {
			return
		}
	}
	for i := 1; i <= runs; i++ {
		if !t.Run(fmt.Sprintf("watcher owner killed during deletions/%d", i), c.watcherKilled) {
			return
		}
	}
	outage := 10 * time.Second
	if v := os.Getenv("ARGUS_CHAOS_OUTAGE"); v != "" {
		outage, _ = time.ParseDuration(v)
	}
	if !t.Run(fmt.Sprintf("FerretDB stopped for %s", outage), func(t *testing.T) { c.storeDown(t, outage) }) {
		return
	}
	if !t.Run("etcd leader killed mid-apply", c.etcdLeaderKilled) {
		return
	}
}

func newChaos(t *testing.T) *chaos {
	c := &chaos{t: t, down: map[string]bool{}, paused: map[int]bool{}, rev: 1}
	c.h = startHA(t, 3, "--callback-allow", "127.0.0.1", "--lease-ttl", chaosTTL.String())
	t.Cleanup(c.cleanup)
	stores, err := testenv.ReadHAStores(filepath.Join(c.h.dir, "stores"))
	if err != nil {
		t.Fatal(err)
	}
	c.stores = stores
	var eps []string
	for _, name := range []string{"e1", "e2", "e3"} {
		eps = append(eps, c.stores[name].URL)
	}
	c.etcd, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.etcd.Close() })
	r := c.h.replicas[0]
	c.onboard(r)
	c.waitRev(c.rev, "instantiated")
	r.waitStatus2(chaosDIG, "type=rsync", "every ConfigMap Applied", allRsync("Applied", "Instantiated"))
	c.hook = newHook(t, "ok")
	r.must(201, "POST", chaosDIG+"/status/subscriptions", map[string]any{"name": "chaos", "callback-url": c.hook.url(), "min-notify-interval": 0})
	return c
}

// cleanup resumes what a failed test left paused (only those: a process
// killed meanwhile was reaped, and its pid may be another's now) and stops
// what it restarted, before ha-up.sh stops the rest.
func (c *chaos) cleanup() {
	defer removeApp(c.t, chaosApp)
	c.mu.Lock()
	for pid := range c.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	c.mu.Unlock()
	for _, p := range c.restarted {
		p.Stop(30 * time.Second)
	}
}

// onboard registers the clusters and a DIG of chaosPerCl ConfigMaps per
// cluster, and instantiates it.
func (c *chaos) onboard(r *haReplica) {
	t := c.t
	r.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for _, cl := range sim.Clusters {
		if code, body := r.upload("/v2/cluster-providers/cp/clusters", meta(cl.Name), cl.Kubeconfig); code != 201 {
			t.Fatalf("cluster %s: %d %s", cl.Name, code, body)
		}
		r.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+cl.Name+"/labels", map[string]string{"clusterLabel": "edge"})
	}
	r.must(201, "POST", "/v2/projects", meta("chaos"))
	r.must(201, "POST", "/v2/projects/chaos/composite-apps", obj("ca", map[string]any{"compositeAppVersion": "v1"}))
	r.must(201, "POST", chaosCA+"/composite-profiles", meta("cpf"))
	if code, body := r.upload(chaosCA+"/apps", meta(chaosApp), testenv.Archive(t, filepath.Join("testdata/charts", chaosApp))); code != 201 {
		t.Fatalf("app: %d %s", code, body)
	}
	profile := testenv.ArchiveFiles(t, map[string]string{
		"manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
		"override_values.yaml": "rev: \"0\"\n",
	})
	if code, body := r.upload(chaosCA+"/composite-profiles/cpf/profiles", obj("p", map[string]any{"app": chaosApp}), profile); code != 201 {
		t.Fatalf("profile: %d %s", code, body)
	}
	r.must(201, "POST", chaosCA+"/deployment-intent-groups", c.digObject())
	r.must(201, "POST", chaosDIG+"/generic-placement-intents", meta("gpi"))
	r.must(201, "POST", chaosDIG+"/generic-placement-intents/gpi/app-intents", obj("pl", map[string]any{
		"app": chaosApp, "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "clusterLabel": "edge"}}}}))
	r.must(201, "POST", chaosDIG+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	r.must(202, "POST", chaosDIG+"/approve", nil)
	r.must(202, "POST", chaosDIG+"/instantiate", nil)
}

func (c *chaos) digObject() map[string]any {
	return obj("dig", map[string]any{"compositeProfile": "cpf", "version": "r1", "overrideValues": []any{
		map[string]any{"app": chaosApp, "values": map[string]any{"count": strconv.Itoa(chaosPerCl), "rev": strconv.Itoa(c.rev)}}}})
}

// update makes the DIG's ConfigMaps hold the next revision, through r.
func (c *chaos) update(r *haReplica) {
	c.rev++
	r.must(200, "PUT", chaosDIG, c.digObject())
	r.must(202, "POST", chaosDIG+"/update", nil)
}

// alive is a replica neither killed nor paused, other than the ones named.
func (c *chaos) alive(not ...string) *haReplica {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.h.replicas {
		if !c.down[r.id] && !slices.Contains(not, r.id) {
			return r
		}
	}
	c.t.Fatal("no replica left")
	return nil
}

func (c *chaos) replica(id string) *haReplica {
	for _, r := range c.h.replicas {
		if r.id == id {
			return r
		}
	}
	c.t.Fatalf("no replica %s", id)
	return nil
}

func (c *chaos) setDown(id string, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down[id] = down
}

// owner is the one replica that owns item, as a live replica sees it.
func (c *chaos) owner(t *testing.T, items func(api.Replica) []string, item string) *haReplica {
	t.Helper()
	var got []string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if got = owners(c.alive().replicaSet(), items)[item]; len(got) == 1 {
			return c.replica(got[0])
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s is owned by %v", item, got)
	return nil
}

func digs(r api.Replica) []string         { return r.DIGs }
func clusterItems(r api.Replica) []string { return r.Clusters }

// cm is a ConfigMap of the DIG as a cluster has it.
type cm struct {
	rev, rv string
	applied time.Time // the argus field manager's last write
}

// configMaps lists the DIG's ConfigMaps on a cluster.
func configMaps(t testing.TB, cluster string) map[string]cm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := sim.Cluster(cluster).Clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "argus.io/app=" + chaosApp})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cm{}
	for _, o := range l.Items {
		v := cm{rev: o.Data["rev"], rv: o.ResourceVersion}
		for _, f := range o.ManagedFields {
			if f.Manager == "argus" && f.Time != nil && f.Time.After(v.applied) {
				v.applied = f.Time.Time
			}
		}
		out[o.Name] = v
	}
	return out
}

// atRev counts the ConfigMaps holding rev on both clusters.
func atRev(t testing.TB, rev int) (n, total int) {
	for _, cl := range sim.Clusters {
		for _, v := range configMaps(t, cl.Name) {
			total++
			if v.rev == strconv.Itoa(rev) {
				n++
			}
		}
	}
	return n, total
}

// waitRev waits until every ConfigMap on both clusters holds rev.
func (c *chaos) waitRev(rev int, what string) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		n, total := atRev(c.t, rev)
		if n == 2*chaosPerCl && total == n {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			c.t.Fatalf("%s: %d of %d ConfigMaps hold revision %d after 2 minutes", what, n, total, rev)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
}

// allRsync says every ConfigMap has rsync status want and the DIG status.
func allRsync(want, digStatus string) func(status.Response) (bool, string) {
	return func(s status.Response) (bool, string) {
		n := 0
		for k, res := range resources(s) {
			if k.kind != "ConfigMap" {
				continue
			}
			n++
			if res.RsyncStatus != want {
				return false, fmt.Sprintf("%v %s", k, res.RsyncStatus)
			}
		}
		return n == 2*chaosPerCl && s.Status == digStatus, fmt.Sprintf("status %s, %d ConfigMaps", s.Status, n)
	}
}

// waitStatus2 is waitStatus for any DIG path.
func (r *haReplica) waitStatus2(path, query, what string, cond func(status.Response) (bool, string)) time.Duration {
	r.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < 2*time.Minute {
		var s status.Response
		if code, body := r.call("GET", path+"/status?"+query, nil); code == 200 && json.Unmarshal([]byte(body), &s) == nil {
			ok, state := cond(s)
			if ok {
				return time.Since(start)
			}
			last = state
		} else {
			last = fmt.Sprintf("%d %.200s", code, body)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	r.t.Fatalf("%s: not true after 2 minutes; last: %s", what, last)
	return 0
}

// sendSignal sends sig to a replica (or store) process, and keeps
// which it stopped and has not resumed for cleanup.
func (c *chaos) sendSignal(t testing.TB, pid int, sig syscall.Signal) time.Time {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch sig {
	case syscall.SIGSTOP:
		c.paused[pid] = true
	case syscall.SIGCONT, syscall.SIGKILL:
		delete(c.paused, pid)
	}
	return time.Now()
}

// logSince is what a replica logged since offset bytes into its log.
func (c *chaos) logSince(id string, offset int64) string {
	b, _ := os.ReadFile(filepath.Join(c.h.dir, "logs", "orch"+strings.TrimPrefix(id, "r")+".log"))
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// lastLines is the last n lines of log that contain sub.
func lastLines(log, sub string, n int) string {
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "")
}

func (c *chaos) logSize(id string) int64 {
	fi, err := os.Stat(filepath.Join(c.h.dir, "logs", "orch"+strings.TrimPrefix(id, "r")+".log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// pausedOwner is issue 27's first fault: the DIG's owner is stopped
// (SIGSTOP) in the middle of an update's apply while a newer update is
// applied by the replica that takes the DIG over; once it wakes it writes
// nothing: every ConfigMap keeps the newest revision, none is written
// after the wake, and its log says it stopped.
func (c *chaos) pausedOwner(t *testing.T, pause time.Duration) {
	owner := c.owner(t, digs, chaosDIGKey)
	other := c.alive(owner.id)
	n0 := len(mustPosts(c.hook))
	pausedAt, mid := c.pauseMidApply(t, owner, other)
	t.Logf("paused %s (the DIG's owner) with %d of %d ConfigMaps at revision %d", owner.id, mid, 2*chaosPerCl, c.rev)
	c.update(other) // blocks until the paused owner's action is taken over and stopped
	c.waitRev(c.rev, "the newer revision applied by the next owner")
	next := c.owner(t, digs, chaosDIGKey)
	if next.id == owner.id {
		t.Fatalf("the paused replica %s still owns the DIG", owner.id)
	}
	t.Logf("revision %d applied everywhere by %s %s after the pause", c.rev, next.id, time.Since(pausedAt).Round(time.Millisecond))
	if wait := time.Until(pausedAt.Add(pause)); wait > 0 {
		time.Sleep(wait) // the fault itself: the owner stays paused this long
	}
	before := c.snapshot(t)
	logAt := c.logSize(owner.id)
	rev := c.etcdRevision(t)
	wokeAt := c.sendSignal(t, owner.pid, syscall.SIGCONT)
	c.setDown(owner.id, false)
	// It notices it lost its lease and registers again; whatever it had in
	// flight was tried (and refused) by then.
	deadline := time.Now().Add(60 * time.Second)
	for !c.registeredAgain(owner.id, rev) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not register again after waking: %s", owner.id, c.logSince(owner.id, logAt))
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	after := c.snapshot(t)
	latest := time.Time{}
	for name, b := range before {
		a := after[name]
		if a.rv != b.rv || a.rev != strconv.Itoa(c.rev) {
			t.Errorf("%s changed after %s woke: revision %s→%s, resourceVersion %s→%s, written %s (woke %s)",
				name, owner.id, b.rev, a.rev, b.rv, a.rv, a.applied.Format(time.RFC3339), wokeAt.Format(time.RFC3339))
		}
		if a.applied.After(latest) {
			latest = a.applied
		}
	}
	woke := c.logSince(owner.id, logAt)
	// Its run stopped, by its fence or cancelled by the release.
	stopped := strings.Count(woke, "this replica may no longer write") + strings.Count(woke, `"msg":"rsync action cancelled"`)
	t.Logf("after the wake: %d ConfigMaps unchanged; last argus write %s, the wake %s; %s logged %d runs stopped or cancelled",
		len(after), latest.Format(time.RFC3339), wokeAt.Format(time.RFC3339Nano), owner.id, stopped)
	if latest.After(wokeAt) {
		t.Errorf("a ConfigMap was written at %s, after the paused owner woke at %s", latest, wokeAt)
	}
	if !strings.Contains(woke, "lease expired") || stopped == 0 {
		t.Errorf("%s's log does not say it lost its lease and stopped its run", owner.id)
	}
	if t.Failed() || os.Getenv("ARGUS_CHAOS_LOG") != "" {
		t.Logf("%s's log after the wake (from byte %d):\n%s\ntail: %s", owner.id, logAt, woke, c.h.log(owner.id))
	}
	c.alive().waitStatus2(chaosDIG, "type=rsync", "every ConfigMap Applied after the update", allRsync("Applied", "Updated"))
	c.checkCallbacks(t, n0)
}

// pauseMidApply updates the DIG through other and pauses owner as soon as
// the first ConfigMap holds the new revision (a watch on cluster1); it
// tries again if the apply was over by then.
func (c *chaos) pauseMidApply(t *testing.T, owner, other *haReplica) (time.Time, int) {
	for attempt := 1; attempt <= 3; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		w, err := sim.Cluster(chaosCluster).Clientset().CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{LabelSelector: "argus.io/app=" + chaosApp})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		c.update(other)
		var pausedAt time.Time
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(*corev1.ConfigMap); ok && o.Data["rev"] == strconv.Itoa(c.rev) {
				pausedAt = c.sendSignal(t, owner.pid, syscall.SIGSTOP)
				c.setDown(owner.id, true)
				break
			}
		}
		w.Stop()
		cancel()
		if pausedAt.IsZero() {
			t.Fatal("the update never reached the cluster")
		}
		if n, total := atRev(t, c.rev); n < total {
			return pausedAt, n
		}
		t.Logf("attempt %d: the apply was over before the pause; again", attempt)
		c.sendSignal(t, owner.pid, syscall.SIGCONT)
		c.setDown(owner.id, false)
		c.alive().waitStatus2(chaosDIG, "type=rsync", "the update applied", allRsync("Applied", "Updated"))
	}
	t.Fatal("could not pause the owner mid-apply")
	return time.Time{}, 0
}

// snapshot is every ConfigMap of the DIG on both clusters.
func (c *chaos) snapshot(t testing.TB) map[string]cm {
	out := map[string]cm{}
	for _, cl := range sim.Clusters {
		for name, v := range configMaps(t, cl.Name) {
			out[cl.Name+"/"+name] = v
		}
	}
	return out
}

// registeredAgain reports whether the replica's member key was created
// after etcd revision rev (it registered again, on a new lease).
func (c *chaos) registeredAgain(id string, rev int64) bool {
	resp, err := c.etcd.Get(context.Background(), "/argus/replicas/"+id)
	return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision > rev
}

// etcdRevision is the etcd cluster's revision now.
func (c *chaos) etcdRevision(t testing.TB) int64 {
	t.Helper()
	resp, err := c.etcd.Get(context.Background(), "/argus/replicas/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// checkCallbacks checks the callbacks delivered since the first n0: their
// sequence numbers run on without a gap, and applied in order they leave
// each ConfigMap as its status now says.
func (c *chaos) checkCallbacks(t *testing.T, n0 int) {
	t.Helper()
	got := seqs(c.hook)
	if !contiguous(got) {
		t.Fatalf("sequence numbers %v: a gap", got)
	}
	c.waitQuiet(t)
	view := accumulate(mustPosts(c.hook))
	var s status.Response
	if err := json.Unmarshal([]byte(c.alive().must(200, "GET", chaosDIG+"/status?type=cluster", nil)), &s); err != nil {
		t.Fatal(err)
	}
	reported := 0
	for k, res := range resources(s) {
		e, ok := view[k.cluster+"/"+k.name]
		if k.kind != "ConfigMap" || !ok {
			continue // not changed since the subscription was made
		}
		reported++
		if e["cluster-status"] != res.ClusterStatus || e["ready-status"] != res.ReadyStatus {
			t.Errorf("%s/%s: the callbacks leave it %v/%v, the status says %s/%s", k.cluster, k.name,
				e["cluster-status"], e["ready-status"], res.ClusterStatus, res.ReadyStatus)
		}
	}
	t.Logf("%d callbacks in all, %d in this step, sequence numbers contiguous; the %d ConfigMaps they report are as the status says",
		len(got), len(got)-n0, reported)
}

// waitQuiet waits until the subscription has nothing pending, every
// frozen payload was delivered, and the callbacks leave each ConfigMap
// they report as the status says (the last change was frozen and sent).
func (c *chaos) waitQuiet(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		r := c.alive()
		v := r.subscription(chaosDIG + "/status/subscriptions/chaos")
		got := seqs(c.hook)
		if v.Delivery.Pending || lastSeq(got) != v.Delivery.Sequence {
			last = fmt.Sprintf("pending %v, sequence %d, delivered %d", v.Delivery.Pending, v.Delivery.Sequence, len(got))
		} else if diff := c.callbacksBehind(r); diff != "" {
			last = diff
		} else {
			return
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("the subscription did not settle in 60s: %s", last)
}

// lastSeq is the highest sequence number delivered, 0 before any (a run
// of the later steps alone, with -run, may start without one).
func lastSeq(got []int64) int64 {
	if len(got) == 0 {
		return 0
	}
	return slices.Max(got)
}

// callbacksBehind names a ConfigMap the callbacks report otherwise than
// the status does now; "" when there is none.
func (c *chaos) callbacksBehind(r *haReplica) string {
	var s status.Response
	if code, body := r.call("GET", chaosDIG+"/status?type=cluster", nil); code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		return "no status"
	}
	view := accumulate(mustPosts(c.hook))
	for k, res := range resources(s) {
		if e, ok := view[k.cluster+"/"+k.name]; ok && k.kind == "ConfigMap" &&
			(e["cluster-status"] != res.ClusterStatus || e["ready-status"] != res.ReadyStatus) {
			return fmt.Sprintf("%s/%s reported %v/%v, now %s/%s", k.cluster, k.name, e["cluster-status"], e["ready-status"],
				res.ClusterStatus, res.ReadyStatus)
		}
	}
	return ""
}

// accumulate applies the callbacks' changes in sequence order: each
// ConfigMap's last reported entry, by "<cluster>/<name>".
func accumulate(posts []post) map[string]map[string]any {
	sort.SliceStable(posts, func(i, j int) bool { return posts[i].seq < posts[j].seq })
	out := map[string]map[string]any{}
	for _, p := range posts {
		for _, l := range [][]map[string]any{p.doc.Changes.Created, p.doc.Changes.Modified} {
			for _, e := range l {
				if k, ok := cmKey(e); ok {
					out[k] = e
				}
			}
		}
		for _, e := range p.doc.Changes.Deleted {
			if k, ok := cmKey(e); ok {
				delete(out, k)
			}
		}
	}
	return out
}

// cmKey is a callback entry's "<cluster>/<name>" when it is a ConfigMap.
func cmKey(e map[string]any) (string, bool) {
	gvk, _ := e["GVK"].(map[string]any)
	if gvk["Kind"] != "ConfigMap" {
		return "", false
	}
	cl, _ := e["cluster"].(string)
	name, _ := e["name"].(string)
	return cl + "/" + name, true
}

// cmdline is a process's command line.
func cmdline(t testing.TB, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// kill -9s a replica and returns its command line, to restart it.
func (c *chaos) kill(t *testing.T, r *haReplica) ([]string, time.Time) {
	t.Helper()
	args := cmdline(t, r.pid)
	at := c.sendSignal(t, r.pid, syscall.SIGKILL)
	c.setDown(r.id, true)
	return args, at
}

// restart starts a killed process again as this test's child, its output
// appended to log; it is stopped at cleanup.
func (c *chaos) restart(t *testing.T, args []string, log string) *exec.Cmd {
	t.Helper()
	f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p, err := testenv.StartProc(cmd, nil)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.restarted = append(c.restarted, p)
	c.mu.Unlock()
	return cmd
}

// restartReplica restarts a killed replica and waits until it is ready.
func (c *chaos) restartReplica(t *testing.T, r *haReplica, args []string) {
	t.Helper()
	cmd := c.restart(t, args, filepath.Join(c.h.dir, "logs", "orch"+strings.TrimPrefix(r.id, "r")+".log"))
	r.pid = cmd.Process.Pid
	deadline := time.Now().Add(2 * time.Minute)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		if resp, err := client.Get(r.base + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready 2 minutes after its restart: %s", r.id, c.h.log(r.id))
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	c.setDown(r.id, false)
}

// watcherKilled is issue 27's second fault: the replica watching
// cluster1 is killed 0.3 s into 200 ConfigMap deletions there. No callback
// frozen once its lease could have expired reports a ConfigMap deleted by
// then Present or Ready (the next watcher reports the cluster Unknown until
// it has read its bundles, then the truth). Then the killed replica is
// restarted, takes its cluster back, and that sends no notification at
// all: the next callback is a change made after the handover.
func (c *chaos) watcherKilled(t *testing.T) {
	c.restore(t)
	victim := c.owner(t, clusterItems, "cp+"+chaosCluster)
	c.waitQuiet(t)
	n0 := len(mustPosts(c.hook))
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range configMaps(t, chaosCluster) {
			if !yield(name) {
				return
			}
		}
	})[:200]
	var args []string
	var killedAt time.Time
	deletedAt := c.deleteBurst(t, chaosCluster, names, 300*time.Millisecond, func() { args, killedAt = c.kill(t, victim) })
	// Its lease was renewed at most a second before the kill (every TTL/5),
	// so it may expire from TTL-1s after the kill on: from then on only
	// the next watcher's word (Unknown, then the truth) may be sent.
	anchor := killedAt.Add(chaosTTL - time.Second)
	var before []string // deleted well before the victim's lease could expire
	last := time.Time{}
	for name, at := range deletedAt {
		if at.Before(anchor.Add(-time.Second)) {
			before = append(before, name)
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("killed %s (cluster1's watcher) 0.3s into the deletions; all 200 deleted %s after the kill (%d before its lease could expire)",
		victim.id, last.Sub(killedAt).Round(time.Millisecond), len(before))
	c.alive().waitStatus2(chaosDIG, "type=cluster", "the deleted ConfigMaps NotPresent, the others Ready", deletedTruth(names))
	c.waitQuiet(t)
	c.checkNoStaleReady(t, n0, anchor, before)
	c.checkCallbacks(t, n0)

	// The victim comes back and takes cluster1 back: nothing changed, so
	// nothing is sent.
	c.restartReplica(t, victim, args)
	c.waitPublished(t, victim)
	c.waitQuiet(t)
	c.marker(t, "after "+victim.id+" took cluster1 back", true)
}

// restore brings back ConfigMaps an earlier step deleted (an update to
// the next revision applies every one).
func (c *chaos) restore(t *testing.T) {
	if n, total := atRev(t, c.rev); n == 2*chaosPerCl && total == n {
		return
	}
	c.update(c.alive())
	c.waitRev(c.rev, "the deleted ConfigMaps restored")
	c.alive().waitStatus2(chaosDIG, "type=cluster", "every ConfigMap ready again", func(s status.Response) (bool, string) {
		return deletedTruth(nil)(s)
	})
}

// deleteBurst deletes the ConfigMaps from a cluster, 16 at a time, and
// calls fault once after into the burst; it returns when each was
// deleted.
func (c *chaos) deleteBurst(t *testing.T, cluster string, names []string, after time.Duration, fault func()) map[string]time.Time {
	t.Helper()
	cs := sim.Cluster(cluster).Clientset()
	var mu sync.Mutex
	deleted := map[string]time.Time{}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				if err := cs.CoreV1().ConfigMaps("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
					errs <- fmt.Errorf("delete %s: %w", name, err)
					continue
				}
				mu.Lock()
				deleted[name] = time.Now()
				mu.Unlock()
			}
		}()
	}
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		time.Sleep(after) // the fault's timing
		fault()
	}()
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	<-faulted
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return deleted
}

// deletedTruth says the named ConfigMaps are NotPresent and every other
// Present and Ready, on clusters the status believes.
func deletedTruth(deleted []string) func(status.Response) (bool, string) {
	gone := map[string]bool{}
	for _, n := range deleted {
		gone[chaosCluster+"/"+n] = true
	}
	return func(s status.Response) (bool, string) {
		n := 0
		for k, res := range resources(s) {
			if k.kind != "ConfigMap" {
				continue
			}
			n++
			want := "Present/Ready"
			if gone[k.cluster+"/"+k.name] {
				want = "NotPresent/NotPresent"
			}
			if got := res.ClusterStatus + "/" + res.ReadyStatus; got != want {
				return false, fmt.Sprintf("%s/%s is %s (%s), want %s", k.cluster, k.name, got, res.Reason, want)
			}
		}
		return n == 2*chaosPerCl, fmt.Sprintf("%d ConfigMaps", n)
	}
}

// checkNoStaleReady checks the callbacks delivered since the first n0:
// none frozen after anchor reports a ConfigMap of gone Present or Ready.
func (c *chaos) checkNoStaleReady(t *testing.T, n0 int, anchor time.Time, gone []string) {
	t.Helper()
	isGone := map[string]bool{}
	for _, n := range gone {
		isGone[chaosCluster+"/"+n] = true
	}
	posts := mustPosts(c.hook)[n0:]
	checked, unknown := 0, 0
	for _, p := range posts {
		ts, _ := strconv.ParseInt(p.ts, 10, 64)
		if ts < anchor.Unix() {
			continue
		}
		checked++
		for _, l := range [][]map[string]any{p.doc.Changes.Created, p.doc.Changes.Modified} {
			for _, e := range l {
				k, ok := cmKey(e)
				if !ok {
					continue
				}
				if e["ready-status"] == "Unknown" {
					unknown++
				}
				if isGone[k] && (e["cluster-status"] == "Present" || e["ready-status"] == "Ready") {
					t.Errorf("callback %d (frozen %s, %s after the lease could expire) reports deleted %s %v/%v: %v",
						p.seq, time.Unix(ts, 0).Format(time.RFC3339), time.Unix(ts, 0).Sub(anchor), k, e["cluster-status"], e["ready-status"], e["reason"])
				}
			}
		}
	}
	t.Logf("%d callbacks since the kill, %d frozen after the lease could expire (%d entries Unknown among them); none reports a deleted ConfigMap Present or Ready",
		len(posts), checked, unknown)
}

// waitPublished waits until r owns cluster1 and has published its state
// (on its own lease).
func (c *chaos) waitPublished(t *testing.T, r *haReplica) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		owner := owners(c.alive().replicaSet(), clusterItems)["cp+"+chaosCluster]
		st, err := c.etcd.Get(context.Background(), "/argus/clusters/cp+"+chaosCluster)
		m, merr := c.etcd.Get(context.Background(), "/argus/replicas/"+r.id)
		if err == nil && merr == nil && len(st.Kvs) == 1 && len(m.Kvs) == 1 && slices.Equal(owner, []string{r.id}) &&
			st.Kvs[0].Lease == m.Kvs[0].Lease {
			return
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s did not take cluster1 back and publish its state", r.id)
}

// marker makes one change (a ConfigMap deleted on cluster2) and waits for
// its callback, the next sequence number after those delivered. With
// alone, that callback must carry it alone: nothing else was sent since.
func (c *chaos) marker(t *testing.T, when string, alone bool) {
	t.Helper()
	got := seqs(c.hook)
	last := lastSeq(got)
	name := chaosApp + "-" + strconv.Itoa(chaosPerCl-1)
	if err := sim.Cluster("cluster2").Clientset().CoreV1().ConfigMaps("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var first *post
	p := c.hook.waitPost(len(got), "for the marker change "+when, func(p post) bool {
		if first == nil {
			first = &p
		}
		// NotPresent: a callback of the change before it (an update's
		// re-apply, Present with its new fence, which leaves the status as
		// it was and so does not hold waitQuiet) may still come first.
		e := entry(p.doc.Changes.Modified, "ConfigMap", "cluster2", name)
		return e != nil && e["cluster-status"] == "NotPresent"
	})
	var keys []string
	for _, e := range append(append(slices.Clone(first.doc.Changes.Created), first.doc.Changes.Modified...), first.doc.Changes.Deleted...) {
		k, _ := cmKey(e)
		keys = append(keys, fmt.Sprintf("%s %v/%v", k, e["cluster-status"], e["ready-status"]))
	}
	if e := entry(p.doc.Changes.Modified, "ConfigMap", "cluster2", name); e["cluster-status"] != "NotPresent" {
		t.Fatalf("the marker change %s reports %v", when, e)
	}
	if alone && (first.seq != last+1 || first.seq != p.seq || len(keys) != 1) {
		t.Fatalf("the first callback %s is #%d with %v; want #%d with only cluster2/%s NotPresent", when, first.seq, keys, last+1, name)
	}
	if !contiguous(seqs(c.hook)) {
		t.Fatalf("sequence numbers %v: a gap", seqs(c.hook))
	}
	t.Logf("the marker change %s came as callback #%d (the last before it #%d)", when, p.seq, last)
}

// etcdLeaderKilled kills -9 the etcd leader right after an update was
// asked for: the update is applied everywhere, the status says so, and
// callbacks go on in sequence; the member is restarted afterwards.
func (c *chaos) etcdLeaderKilled(t *testing.T) {
	c.restore(t)
	c.waitQuiet(t)
	n0 := len(mustPosts(c.hook))
	leader := ""
	for _, name := range []string{"e1", "e2", "e3"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.etcd.Status(ctx, c.stores[name].URL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			leader = name
		}
	}
	if leader == "" {
		t.Fatal("no etcd leader")
	}
	args := cmdline(t, c.stores[leader].PID)
	c.update(c.alive())
	c.sendSignal(t, c.stores[leader].PID, syscall.SIGKILL)
	took := c.waitRev(c.rev, "the update applied after the etcd leader died")
	c.alive().waitStatus2(chaosDIG, "type=rsync", "every ConfigMap Applied after the update", allRsync("Applied", "Updated"))
	t.Logf("killed the etcd leader %s right after an update: applied everywhere %s after the kill", leader, took.Round(time.Millisecond))
	c.waitQuiet(t)
	c.marker(t, "after the etcd leader died", false)
	c.checkCallbacks(t, n0)
	cmd := c.restart(t, args, filepath.Join(c.h.dir, "logs", leader+".log"))
	s := c.stores[leader]
	s.PID = cmd.Process.Pid
	c.stores[leader] = s
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.etcd.Status(ctx, s.URL)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd member %s did not come back: %v", leader, err)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
}

// storeDown stops FerretDB (SIGSTOP: it hangs, the harder case) for
// outage: status, history and lists keep answering from etcd and the caches,
// fast; a create answers 503 with a reason within 2 s; a cluster change
// still reaches the subscriber; once FerretDB is back nothing half made
// is left (no object of a refused create, no write intent) and creates
// work again.
func (c *chaos) storeDown(t *testing.T, outage time.Duration) {
	c.restore(t)
	c.waitQuiet(t)
	fer := c.stores["ferretdb"]
	stoppedAt := c.sendSignal(t, fer.PID, syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			c.sendSignal(t, fer.PID, syscall.SIGCONT)
		}
	}()
	var lat []time.Duration
	type probe struct {
		took    time.Duration
		replica string
		at      time.Duration // into the outage
	}
	var slowest probe
	var others time.Duration // the slowest history or list answer
	var creates []string
	var createLat time.Duration
	client := &http.Client{Timeout: 30 * time.Second}
	failed := map[string]int{}
	get := func(r *haReplica, path string) (int, time.Duration) {
		start := time.Now()
		resp, err := client.Get(r.base + path)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("GET %s during the outage: %v", path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != 200 && failed[path] == 0 {
			// Once per path (the outage goes on: the other answers and
			// the creates are still checked).
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
			t.Errorf("GET %s through %s during the outage: %d %s after %s; its log: %s", path, r.id, resp.StatusCode, b, took,
				lastLines(c.logSince(r.id, 0), `"level":"error"`, 2))
		}
		if resp.StatusCode != 200 {
			failed[path]++
		}
		return resp.StatusCode, took
	}
	markerDone := false
	for i := 0; time.Since(stoppedAt) < outage; i++ {
		for _, r := range c.h.replicas {
			for _, path := range []string{chaosDIG + "/status?type=cluster", chaosDIG + "/status/history", "/v2/projects", chaosCA + "/apps"} {
				at := time.Since(stoppedAt)
				_, took := get(r, path)
				if strings.Contains(path, "/status?") {
					lat = append(lat, took)
					if took > slowest.took {
						slowest = probe{took: took, replica: r.id, at: at}
					}
				} else {
					others = max(others, took)
				}
			}
		}
		if i%10 == 2 {
			name, took := c.refusedCreate(t, fmt.Sprintf("down%d", i))
			creates, createLat = append(creates, name), max(createLat, took)
		}
		if !markerDone && time.Since(stoppedAt) > 3*time.Second {
			markerDone = true
			c.marker(t, "while FerretDB is stopped", false)
		}
		time.Sleep(200 * time.Millisecond) // the outage's pace of probes
	}
	c.sendSignal(t, fer.PID, syscall.SIGCONT)
	resumed = true
	slices.Sort(lat)
	t.Logf("FerretDB stopped %s: %d status answers, p50 %s, p99 %s, max %s (through %s, %s into the outage); history and lists max %s; "+
		"%d creates refused, the slowest after %s; answers not 200 by path: %v",
		outage, len(lat), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond),
		slowest.took.Round(time.Microsecond), slowest.replica, slowest.at.Round(time.Millisecond), others.Round(time.Microsecond),
		len(creates), createLat.Round(time.Millisecond), failed)
	if lat[len(lat)-1] > 500*time.Millisecond {
		t.Errorf("a status answer took %s during the outage (target 100ms)", lat[len(lat)-1])
	}
	c.afterOutage(t, creates)
}

// refusedCreate creates a project while MongoDB is down: 503 with a
// reason, within 2 s (asserted at 10 s, a loose bound for CI).
func (c *chaos) refusedCreate(t *testing.T, name string) (string, time.Duration) {
	r := c.alive()
	start := time.Now()
	code, body := r.call("POST", "/v2/projects", meta(name))
	took := time.Since(start)
	if code != 503 || !strings.Contains(body, "MongoDB") {
		t.Fatalf("create during the outage: %d %q after %s, want 503 naming MongoDB", code, body, took)
	}
	if took > 10*time.Second {
		t.Errorf("create during the outage answered after %s (target 2s)", took)
	}
	t.Logf("create during the outage: 503 after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(body))
	return name, took
}

// afterOutage checks, once FerretDB is back, that the refused creates
// left nothing, no write intent stays, and creates work again.
func (c *chaos) afterOutage(t *testing.T, refused []string) {
	r := c.alive()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := c.etcd.Get(context.Background(), "/argus/catalog-intents/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalogue write intents left a minute after the outage: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	for _, name := range refused {
		if code, body := r.call("GET", "/v2/projects/"+name, nil); code != 404 {
			t.Fatalf("a project refused during the outage exists: %d %s", code, body)
		}
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, body := r.call("POST", "/v2/projects", meta("after-outage"))
		if code == 201 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("creates still fail a minute after the outage: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	r.must(204, "DELETE", "/v2/projects/after-outage", nil)
}

// removeApp deletes what an app's deployments left on the shared
// clusters (its objects and bundles in default), for a test whose stack
// stops without terminating them.
func removeApp(t *testing.T, app string) {
	sel := metav1.ListOptions{LabelSelector: "argus.io/app=" + app}
	for _, cl := range sim.Clusters {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs := cl.Clientset()
		if err := cs.CoreV1().ConfigMaps("default").DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
			t.Logf("%s: remove %s's ConfigMaps: %v", cl.Name, app, err)
		}
		if err := cs.RESTClient().Delete().AbsPath("/apis/k8splugin.io/v1alpha1/namespaces/default/resourcebundlestates").
			Param("labelSelector", sel.LabelSelector).Do(ctx).Error(); err != nil {
			t.Logf("%s: remove %s's bundles: %v", cl.Name, app, err)
		}
		cancel()
	}
}
