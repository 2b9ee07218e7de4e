package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/status"
)

// haSet is scripts/ha-up.sh run by a test: its replicas, and the script's
// process group, stopped at cleanup.
type haSet struct {
	t        testing.TB
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
	out      *bytes.Buffer
	mu       sync.Mutex
	replicas []*haReplica
}

// haReplica is one orchestrator replica of a haSet.
type haReplica struct {
	*orch
	id  string
	pid int
}

// buildOrchestrator builds the orchestrator binary into dir (the Go build
// cache makes every build after the first a link).
func buildOrchestrator(dir string) (string, error) {
	bin := filepath.Join(dir, "orchestrator")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/orchestrator").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
}

// startHA runs scripts/ha-up.sh with n replicas and the given orchestrator
// flags, and returns once DIR/ready exists.
func startHA(t testing.TB, n int, flags ...string) *haSet {
	t.Helper()
	bin, err := buildOrchestrator(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &haSet{t: t, dir: t.TempDir(), exited: make(chan struct{}), out: &bytes.Buffer{}}
	args := append([]string{"--replicas", strconv.Itoa(n), "--dir", h.dir, "--"}, flags...)
	h.cmd = exec.Command("../../../scripts/ha-up.sh", args...)
	h.cmd.Env = append(os.Environ(), "ARGUS_ORCHESTRATOR="+bin)
	h.cmd.Stdout, h.cmd.Stderr = syncWriter{&h.mu, h.out}, syncWriter{&h.mu, h.out}
	// Its own process group, so nothing it started can outlive the test;
	// told to stop if the test process dies.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(h.stop)
	start := time.Now()
	for {
		if _, err := os.Stat(filepath.Join(h.dir, "ready")); err == nil {
			break
		}
		select {
		case <-h.exited:
			t.Fatalf("ha-up.sh exited before ready: %s", h.output())
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("ha-up.sh not ready after 5 minutes: %s", h.output())
		}
	}
	t.Logf("ha-up.sh: %d replicas ready in %s", n, time.Since(start).Round(100*time.Millisecond))
	f, err := os.Open(filepath.Join(h.dir, "replicas"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		url, pid, ok := strings.Cut(sc.Text(), " ")
		p, err := strconv.Atoi(pid)
		if !ok || err != nil {
			t.Fatalf("replicas line %q", sc.Text())
		}
		h.replicas = append(h.replicas, &haReplica{orch: &orch{t: t, base: url}, id: fmt.Sprintf("r%d", i), pid: p})
	}
	if len(h.replicas) != n {
		t.Fatalf("%d replicas listed, want %d", len(h.replicas), n)
	}
	return h
}

func (h *haSet) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out.String()
}

// stop sends the script SIGTERM and waits for it to stop everything; the
// process group is killed if it does not within a minute.
func (h *haSet) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(time.Minute):
		h.t.Errorf("ha-up.sh ignored SIGTERM for a minute: %s", h.output())
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
	}
	// Nothing of the group may be left.
	if err := syscall.Kill(-h.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		h.t.Errorf("processes of ha-up.sh's group survive it (kill -0: %v); killing them", err)
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	}
}

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

func allApplied(r status.Response) (bool, string) {
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
	return n > 0 && r.Status == "Instantiated", fmt.Sprintf("status %s, %d resources", r.Status, n)
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

// waitTakeover waits until the survivors own every cluster and the
// victim is no longer a member.
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

// checkDayTwoAcrossReplicas: two updates of the DIG taken at once by the
// two survivors run one after the other (an etcd lock), each with its
// own revision; a rollback through one of them is applied by the group's
// owner, as both see it.
func checkDayTwoAcrossReplicas(t *testing.T, rest []*haReplica) {
	t.Helper()
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, len(rest))
	for _, r := range rest {
		go func() {
			code, body := r.call("POST", digPath+"/update", nil)
			answers <- answer{code, body}
		}()
	}
	var revs []int64
	for range rest {
		a := <-answers
		rev, err := strconv.ParseInt(strings.TrimSpace(a.body), 10, 64)
		if a.code != 202 || err != nil {
			t.Fatalf("update: %d %q, want 202 with a revision", a.code, a.body)
		}
		revs = append(revs, rev)
	}
	slices.Sort(revs)
	if !slices.Equal(revs, []int64{2, 3}) {
		t.Fatalf("two updates at once through two replicas made revisions %v, want 2 and 3", revs)
	}
	rest[1].must(202, "POST", digPath+"/rollback", map[string]any{"spec": map[string]any{"revision": "1"}})
	// The replica that took the rollback first: its cache has the rollback
	// (read-your-writes), so only the owner's apply satisfies the check.
	for _, r := range []*haReplica{rest[1], rest[0]} {
		took := r.waitStatus("type=rsync", "rolled back, every resource Applied as "+r.id+" sees it", func(s status.Response) (bool, string) {
			n := 0
			for k, res := range resources(s) {
				if k.kind != "Pod" {
					n++
					if res.RsyncStatus != "Applied" {
						return false, fmt.Sprintf("%v %s", k, res.RsyncStatus)
					}
				}
			}
			return n > 0 && s.Status == "Updated", fmt.Sprintf("status %s, %d resources", s.Status, n)
		})
		t.Logf("updates through %s and %s, rollback through %s: Applied as %s sees it after %s",
			rest[0].id, rest[1].id, rest[1].id, r.id, took.Round(time.Millisecond))
	}
	if got := rest[0].lastRevision(digPath); got != 4 {
		t.Fatalf("revision after the rollback = %d, want 4", got)
	}
}

// TestHAReplicas is issue 19's acceptance: three replicas brought up by
// scripts/ha-up.sh on a three-member etcd cluster and a standalone
// FerretDB share the work; a DIG onboarded through one is Applied as every
// other sees it; each cluster is watched by one replica; a subscription
// made through another gets each change once; and when the replica that
// delivers it is killed, a survivor delivers the next change, with
// contiguous sequence numbers, and takes its clusters over. Then two
// updates taken at once by two replicas get revisions of their own, and a
// rollback through one is applied.
func TestHAReplicas(t *testing.T) {
	startMonitors(t, sim)
	h := startHA(t, 3, "--callback-allow", "127.0.0.1", "--lease-ttl", "5s")
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
	p := hk.waitPost(n, "after the owner was killed", func(p post) bool {
		return entry(p.doc.Changes.Created, "Pod", "cluster2", "frontend") != nil
	})
	failover := p.at.Sub(killed)
	t.Logf("failover: kill -9 → next callback %s (change made %s after the kill; lease TTL 5s; bound 30s)",
		failover.Round(time.Millisecond), changed.Sub(killed).Round(time.Millisecond))
	if failover > 30*time.Second {
		t.Errorf("the callback came %s after the kill, over 30s", failover)
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

	checkDayTwoAcrossReplicas(t, rest)
	if t.Failed() {
		t.Logf("log of %s: %s", survivor.id, h.log(survivor.id))
	}
}
