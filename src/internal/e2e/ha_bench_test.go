package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// scaleCounts are the cluster counts BenchmarkHAScale runs:
// ARGUS_SCALE_CLUSTERS (comma-separated); unset skips the benchmark, which
// needs about 175 MiB per cluster and some minutes (make bench runs every
// benchmark).
func scaleCounts(b *testing.B) []int {
	v := os.Getenv("ARGUS_SCALE_CLUSTERS")
	if v == "" {
		b.Skip("set ARGUS_SCALE_CLUSTERS (e.g. 10,25,50) to run it")
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("ARGUS_SCALE_CLUSTERS=%q", v)
		}
		out = append(out, n)
	}
	return out
}

// procStat is a process's resident memory and CPU time so far.
type procStat struct {
	rss int64
	cpu time.Duration
}

func statOf(b *testing.B, pid int) procStat {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command (which may hold spaces): utime and stime
	// are the 12th and 13th after it, rss the 22nd, in pages and ticks.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	rss, _ := strconv.ParseInt(f[21], 10, 64)
	const ticks = 100 // USER_HZ
	return procStat{rss: rss * int64(os.Getpagesize()), cpu: time.Duration(utime+stime) * time.Second / ticks}
}

// setProbe writes the probe Pod's status on one cluster: Running, ready
// or not. No kubelet runs there, so this is its whole status.
func setProbe(b *testing.B, c *simcluster.Cluster, ready bool) time.Time {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, err := writeProbe(ctx, c, ready)
	if err != nil {
		b.Fatalf("%s: %v", c.Name, err)
	}
	return start
}

// writeProbe is setProbe for any goroutine: it returns when the write
// that succeeded started.
func writeProbe(ctx context.Context, c *simcluster.Cluster, ready bool) (time.Time, error) {
	pods := c.Clientset().CoreV1().Pods("default")
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	for {
		pod, err := pods.Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		now := metav1.Now()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: ready, Image: "busybox:1.36",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
		start := time.Now()
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
			return start, nil
		} else if ctx.Err() != nil {
			return time.Time{}, err
		}
	}
}

func percentile(l []time.Duration, p int) time.Duration {
	s := slices.Clone(l)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

// BenchmarkHAScale measures three replicas (scripts/ha-up.sh) watching N
// simulated clusters, one DIG placed on all of them: what each cluster
// costs its owner in memory and CPU, status latency through every
// replica, change → callback latency, and kill -9 of the subscription's
// owner → the next callback. The clusters are API servers alone
// (simcluster.Options.APIServerOnly, about 175 MiB each): a Pod per
// cluster whose status the benchmark writes, and a ConfigMap.
//
//	make sim && ARGUS_SCALE_CLUSTERS=10,25,50 go test ./src/internal/e2e -run '^$' -bench HAScale -benchtime 1x -timeout 60m
func BenchmarkHAScale(b *testing.B) {
	for _, n := range scaleCounts(b) {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) { benchScale(b, n) })
	}
}

func benchScale(b *testing.B, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	clusters, named := startScaleClusters(ctx, b, n)
	var clusterRSS int64
	for _, c := range clusters {
		rss, _ := c.RSS()
		clusterRSS += rss
	}
	b.Logf("%d clusters up in %s, %d MiB of API servers", n, time.Since(start).Round(time.Second), clusterRSS>>20)
	h := startHA(b, 3, "--callback-allow", "127.0.0.1", "--lease-ttl", "5s")
	before := map[string]procStat{}
	for _, r := range h.replicas {
		before[r.id] = statOf(b, r.pid)
	}
	r1 := h.replicas[0]

	onboardProbe(b, r1, clusters, named)
	instantiated := time.Now()
	r1.must(202, "POST", digPath+"/instantiate", nil)
	h.replicas[1].waitStatusFor(10*time.Minute, "type=rsync", "Applied on every cluster", allApplied)
	applied := time.Since(instantiated)
	for _, c := range clusters {
		setProbe(b, c, true)
	}
	readyFor := func(want bool) func(status.Response) (bool, string) {
		return func(r status.Response) (bool, string) {
			ready := 0
			for k, res := range resources(r) {
				if k.kind == "Pod" && res.ReadyStatus == "Ready" {
					ready++
				}
			}
			return ready == n && (r.Ready != nil && *r.Ready) == want, fmt.Sprintf("%d of %d probes ready", ready, n)
		}
	}
	h.replicas[2].waitStatusFor(10*time.Minute, "type=cluster", "every probe ready", readyFor(true))
	b.Logf("instantiated on %d clusters: Applied after %s", n, applied.Round(time.Millisecond))

	// Measured once (the failover kills a replica), whatever -benchtime;
	// reported after b.Loop, whose first call deletes metrics reported before.
	var metrics []metric
	report := func(v float64, unit string) { metrics = append(metrics, metric{v, unit}) }
	line := testenv.FleetLine{Mode: "push", Clusters: n, Replicas: len(h.replicas)}
	measureConfigMaps(b, h, n, &line)
	<-time.After(15 * time.Second) // for what the instantiations left to settle, as BenchmarkFleet does
	line.RSSKiB, line.CPUMs = measureIdle(b, h, before, report)
	hk := measureLatencies(b, h, clusters, named, report)
	measureChurn(b, h, clusters, named, &line)
	line.Reconnect = measureFailover(b, h, hk, clusters, named, report)
	for b.Loop() { // the figures above are the result
	}
	for _, m := range metrics {
		b.ReportMetric(m.v, m.unit)
	}
	fmt.Println(line)
}

// startScaleClusters starts n API-server-only clusters with monitors.
// Ten at a time: fifty API servers starting at once on two cores miss
// their start-up deadline. Each set names its clusters cluster1..10, so
// they are registered as c01, c02 …
func startScaleClusters(ctx context.Context, b *testing.B, n int) ([]*simcluster.Cluster, map[*simcluster.Cluster]string) {
	var clusters []*simcluster.Cluster
	named := map[*simcluster.Cluster]string{}
	for len(clusters) < n {
		set, err := simcluster.Start(ctx, simcluster.Options{Clusters: min(10, n-len(clusters)), Dir: b.TempDir(), APIServerOnly: true})
		if err != nil {
			b.Fatalf("with %d clusters up: %v", len(clusters), err)
		}
		b.Cleanup(func() { _ = testenv.StopClusters(set) })
		if err := installCRD(ctx, set); err != nil {
			b.Fatal(err)
		}
		startMonitors(b, set)
		for _, c := range set.Clusters {
			clusters = append(clusters, c)
			named[c] = fmt.Sprintf("c%02d", len(clusters))
		}
	}
	return clusters, named
}

// onboardProbe registers every cluster and onboards two DIGs placed on
// all of them, approved: dig1 of the probe app, and cmsDIG of manycm with
// 5 ConfigMaps (the fleet line's).
func onboardProbe(b *testing.B, r1 *haReplica, clusters []*simcluster.Cluster, named map[*simcluster.Cluster]string) {
	r1.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for _, c := range clusters {
		if code, body := r1.upload("/v2/cluster-providers/cp/clusters", meta(named[c]), c.Kubeconfig); code != 201 {
			b.Fatalf("cluster %s: %d %s", named[c], code, body)
		}
		r1.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+named[c]+"/labels", map[string]string{"clusterLabel": "edge"})
	}
	r1.must(201, "POST", "/v2/projects", meta("p1"))
	onboardEverywhere(b, r1, "ca", "probe", "{}\n")
	onboardEverywhere(b, r1, "cms", "manycm", "count: 5\n")
}

// onboardEverywhere onboards composite app ca of one app
// (testdata/charts/<app>, with profile values) in project p1 and its DIG
// dig1 placing it on every "edge" cluster, and approves it.
func onboardEverywhere(b *testing.B, r1 *haReplica, ca, app, values string) {
	path := "/v2/projects/p1/composite-apps/" + ca + "/v1"
	dig := path + "/deployment-intent-groups/dig1"
	r1.must(201, "POST", "/v2/projects/p1/composite-apps", obj(ca, map[string]any{"compositeAppVersion": "v1"}))
	r1.must(201, "POST", path+"/composite-profiles", meta("cpf"))
	r1.uploadOK(path+"/apps", meta(app), testenv.Archive(b, "testdata/charts/"+app))
	profile := testenv.ArchiveFiles(b, map[string]string{"manifest.yaml": "version: v1\ntype:\n  values: v.yaml\n", "v.yaml": values})
	r1.uploadOK(path+"/composite-profiles/cpf/profiles", obj(app+"-profile", map[string]any{"app": app}), profile)
	r1.must(201, "POST", path+"/deployment-intent-groups", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1"}))
	r1.must(201, "POST", dig+"/generic-placement-intents", meta("gpi"))
	r1.must(201, "POST", dig+"/generic-placement-intents/gpi/app-intents", obj(app+"-placement", map[string]any{
		"app": app, "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "clusterLabel": "edge"}}}}))
	r1.must(201, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	r1.must(202, "POST", dig+"/approve", nil)
}

// metric is one figure a scale benchmark reports.
type metric struct {
	v    float64
	unit string
}

// measureIdle reports each replica's memory and CPU over a minute, per
// cluster it owns, and returns the fleet line's: all the replicas' RSS
// growth since they started (KiB) and CPU a minute (ms), per cluster.
func measureIdle(b *testing.B, h *haSet, before map[string]procStat, report func(float64, string)) (rssKiB, cpuMs float64) {
	set0 := h.replicas[0].replicaSet()
	owned := map[string]int{}
	for _, r := range set0 {
		owned[r.ID] = len(r.Clusters)
	}
	mid := map[string]procStat{}
	for _, r := range h.replicas {
		mid[r.id] = statOf(b, r.pid)
	}
	window := 60 * time.Second
	time.Sleep(window) // measuring idle cost over a fixed window, not synchronising
	var memPer, cpuPer []float64
	n := 0
	for _, r := range h.replicas {
		now := statOf(b, r.pid)
		rssKiB += float64(now.rss-before[r.id].rss) / 1024
		cpuMs += float64((now.cpu - mid[r.id].cpu).Milliseconds()) / window.Minutes()
		n += owned[r.id]
		if owned[r.id] == 0 {
			continue
		}
		mib := float64(now.rss-before[r.id].rss) / (1 << 20) / float64(owned[r.id])
		cpu := float64((now.cpu - mid[r.id].cpu).Milliseconds()) / window.Minutes() / float64(owned[r.id])
		memPer, cpuPer = append(memPer, mib), append(cpuPer, cpu)
		b.Logf("%s owns %d clusters: RSS %d MiB (%d at start), %.1f ms CPU a minute idle", r.id, owned[r.id],
			now.rss>>20, before[r.id].rss>>20, float64((now.cpu-mid[r.id].cpu).Milliseconds())/window.Minutes())
	}
	report(mean(memPer), "owner-MiB/cluster")
	report(mean(cpuPer), "owner-cpu-ms/min/cluster")
	return rssKiB / float64(max(n, 1)), cpuMs / float64(max(n, 1))
}

// measureLatencies reports the status latency through every replica and
// the change → callback latency; it returns the subscription's hook.
func measureLatencies(b *testing.B, h *haSet, clusters []*simcluster.Cluster, named map[*simcluster.Cluster]string, report func(float64, string)) *hook {
	n := len(clusters)
	// Status through every replica, round robin.
	var lat []time.Duration
	for i := range 300 {
		r := h.replicas[i%3]
		t0 := time.Now()
		r.must(200, "GET", digPath+"/status?type=cluster", nil)
		lat = append(lat, time.Since(t0))
	}
	report(float64(percentile(lat, 50).Microseconds())/1000, "status-p50-ms")
	report(float64(percentile(lat, 99).Microseconds())/1000, "status-p99-ms")

	// Change → callback.
	hk := newHook(b, "ok")
	h.replicas[1].must(201, "POST", digPath+"/status/subscriptions", map[string]any{"name": "scale", "callback-url": hk.url()})
	var cb []time.Duration
	ready := true
	for i := range 30 {
		c := clusters[rand.IntN(n)]
		ready = !ready
		seen := len(mustPosts(hk))
		t0 := setProbe(b, c, ready)
		p := hk.waitPost(seen, fmt.Sprintf("flip %d on %s", i, named[c]), func(p post) bool {
			return entry(p.doc.Changes.Modified, "Pod", named[c], "probe") != nil
		})
		cb = append(cb, p.at.Sub(t0))
		setProbe(b, c, true) // back, and let that settle
		hk.waitPost(seen+1, "flip back on "+named[c], func(p post) bool {
			return entry(p.doc.Changes.Modified, "Pod", named[c], "probe") != nil
		})
		ready = true
	}
	report(float64(percentile(cb, 50).Microseconds())/1000, "callback-p50-ms")
	report(float64(percentile(cb, 99).Microseconds())/1000, "callback-p99-ms")
	return hk
}

// measureFailover kills the subscription's owner, makes a change and
// reports when its callback came; it returns how long until every cluster
// was watched again (by the survivors).
func measureFailover(b *testing.B, h *haSet, hk *hook, clusters []*simcluster.Cluster, named map[*simcluster.Cluster]string,
	report func(float64, string)) time.Duration {
	n := len(clusters)
	owner := owners(h.replicas[0].replicaSet(), func(r api.Replica) []string { return r.Subscriptions })["dig/p1/ca/v1/dig1/scale"]
	if len(owner) != 1 {
		b.Fatalf("the subscription is owned by %v", owner)
	}
	var victim, survivor *haReplica
	for _, r := range h.replicas {
		if r.id == owner[0] {
			victim = r
		} else {
			survivor = r
		}
	}
	lostClusters := 0
	for _, r := range h.replicas[0].replicaSet() {
		if r.ID == victim.id {
			lostClusters = len(r.Clusters)
		}
	}
	seen := len(mustPosts(hk))
	killed := time.Now()
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	c := clusters[rand.IntN(n)]
	setProbe(b, c, false)
	watched := waitWatched(b, survivor, victim.id, n, killed)
	p := hk.waitPost(seen, "after the owner was killed", func(p post) bool {
		return entry(p.doc.Changes.Modified, "Pod", named[c], "probe") != nil
	})
	report(p.at.Sub(killed).Seconds(), "failover-s")
	if !contiguous(seqs(hk)) {
		b.Errorf("sequence numbers across the failover: %v", seqs(hk))
	}
	b.Logf("kill -9 of %s → callback %s; sequence numbers stay contiguous (%d delivered); its %d clusters watched again after %s",
		victim.id, p.at.Sub(killed).Round(time.Millisecond), len(seqs(hk)), lostClusters, watched.Round(time.Millisecond))
	if lostClusters == 0 { // nothing to watch again: no figure
		return -time.Second
	}
	return watched
}

func mean(l []float64) float64 {
	if len(l) == 0 {
		return 0
	}
	var s float64
	for _, v := range l {
		s += v
	}
	return s / float64(len(l))
}

// waitStatusFor is waitStatus with its own deadline, for large setups.
func (o *orch) waitStatusFor(d time.Duration, query, what string, cond func(status.Response) (bool, string)) time.Duration {
	o.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < d {
		ok, state := cond(o.status(query))
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	o.t.Fatalf("%s: not true after %s; last: %s", what, d, last)
	return 0
}
