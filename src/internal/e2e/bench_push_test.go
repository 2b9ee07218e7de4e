package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// BenchmarkHAScale's push-cluster fleet line (issue 26): the measures of
// fleetsim.BenchmarkFleet's line, for API-server clusters with monitors,
// printed as "fleet: mode=push clusters=N replicas=3 …".

// cmsDIG places manycm with 5 ConfigMaps on every cluster: the fleet
// line's DIG (instantiate → all Applied, status p50).
const cmsDIG = "/v2/projects/p1/composite-apps/cms/v1/deployment-intent-groups/dig1"

// scaleChurn is the churn over the fleet, in changes a minute
// (ARGUS_SCALE_CHURN, default 600) for ARGUS_SCALE_CHURN_S seconds (60):
// each a probe readiness flip, a status write to one API server.
func scaleChurn() (perMin int, d time.Duration) {
	perMin, d = 600, time.Minute
	if v, err := strconv.Atoi(os.Getenv("ARGUS_SCALE_CHURN")); err == nil && v > 0 {
		perMin = v
	}
	if v, err := strconv.Atoi(os.Getenv("ARGUS_SCALE_CHURN_S")); err == nil && v > 0 {
		d = time.Duration(v) * time.Second
	}
	return perMin, d
}

// measureConfigMaps instantiates cmsDIG and fills the line's instantiate
// (→ deployedCounts.Applied = 5 N) and its status p50s, 21 GETs each over
// the replicas in turn.
func measureConfigMaps(b *testing.B, h *haSet, n int, line *testenv.FleetLine) {
	h.replicas[0].must(202, "POST", cmsDIG+"/instantiate", nil)
	start := time.Now()
	for {
		var s struct {
			DeployedCounts map[string]int `json:"deployedCounts"`
		}
		_ = json.Unmarshal([]byte(h.replicas[1].must(200, "GET", cmsDIG+"/status?type=rsync&output=summary", nil)), &s)
		if s.DeployedCounts["Applied"] == 5*n {
			break
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("%d of %d ConfigMaps Applied after 10 minutes", s.DeployedCounts["Applied"], 5*n)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	line.Instantiate = time.Since(start)
	p50 := func(q string) time.Duration {
		var took []time.Duration
		for i := range 21 {
			t0 := time.Now()
			h.replicas[i%3].must(200, "GET", cmsDIG+"/status?"+q, nil)
			took = append(took, time.Since(t0))
		}
		return percentile(took, 50)
	}
	line.SummaryP50, line.AllP50 = p50("type=cluster&output=summary"), p50("type=cluster&output=all")
	b.Logf("5 ConfigMaps on %d clusters: Applied %s after instantiate", n, line.Instantiate.Round(time.Millisecond))
}

// probeChange is one probe readiness write of the churn.
type probeChange struct {
	cluster string
	ready   bool
	at      time.Time
}

// lostOnes describes up to three changes no callback named, with the
// callbacks that named their probe.
func lostOnes(posts []post, changes []probeChange) []string {
	var out []string
	for _, c := range changes {
		if _, lost := matchChanges(posts, []probeChange{c}); lost == 0 || len(out) == 3 {
			continue
		}
		var named []string
		for _, p := range posts {
			if e := entry(p.doc.Changes.Modified, "Pod", c.cluster, "probe"); e != nil {
				named = append(named, fmt.Sprintf("%s %v", p.at.Format("15:04:05.000"), e["ready-status"]))
			}
		}
		out = append(out, fmt.Sprintf("%s ready=%t at %s; callbacks naming it: %v", c.cluster, c.ready, c.at.Format("15:04:05.000"), named))
	}
	return out
}

// measureChurn subscribes to dig1's cluster status (entries carry
// readyStatus, as BenchmarkFleet's subscription) and flips the probes at
// scaleChurn's rate for its length, every cluster in turn (one flip per
// cluster every N/rate minutes, so a monitor never coalesces two flips of
// one probe), each cluster ending Ready; it counts what etcd took
// meanwhile and matches every change with the first callback after it
// naming that probe in its new state. Lost are the changes no callback
// named within 30 s after the churn stopped. The subscription is deleted
// after.
func measureChurn(b *testing.B, h *haSet, clusters []*simcluster.Cluster, named map[*simcluster.Cluster]string, line *testenv.FleetLine) {
	perMin, d := scaleChurn()
	hk := newHook(b, "ok")
	h.replicas[2].must(201, "POST", digPath+"/status/subscriptions", map[string]any{"name": "churn", "callback-url": hk.url(), "type": "cluster"})
	waitSubscribed(b, hk, clusters[0])
	line.EtcdKeys, line.EtcdBytes = -1, -1
	stopCount, err := testenv.CountWrites(h.etcd().Endpoints()...)
	if err != nil {
		b.Logf("cannot count etcd writes: %v", err)
	}
	seen := len(mustPosts(hk))
	changes := churnProbes(b, clusters, named, perMin, d)
	var lat []time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; {
		lat, line.Lost = matchChanges(mustPosts(hk)[seen:], changes)
		if line.Lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	if stopCount != nil && len(changes) > 0 {
		keys, bytes := stopCount()
		line.EtcdKeys, line.EtcdBytes = float64(keys)/float64(len(changes)), float64(bytes)/float64(len(changes))
	}
	if len(lat) > 0 {
		line.CbP50, line.CbP99 = percentile(lat, 50), percentile(lat, 99)
	}
	if line.Lost > 0 {
		b.Logf("lost: %v", lostOnes(mustPosts(hk)[seen:], changes))
	}
	b.Logf("churn of %d changes a minute for %s (one flip per cluster, then %s): %d changes, %d delivered, %d lost",
		perMin, d, time.Duration(len(clusters))*time.Minute/time.Duration(perMin), len(changes), len(lat), line.Lost)
	h.replicas[2].must(202, "DELETE", digPath+"/status/subscriptions/churn", nil)
}

// churnProbes runs one writer per cluster and returns every change made.
func churnProbes(b *testing.B, clusters []*simcluster.Cluster, named map[*simcluster.Cluster]string, perMin int, d time.Duration) []probeChange {
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	every := time.Duration(len(clusters)) * time.Minute / time.Duration(perMin)
	end := time.Now().Add(d)
	var mu sync.Mutex
	var changes []probeChange
	var wg sync.WaitGroup
	errs := make(chan error, len(clusters))
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select { // spread the writers over the interval
			case <-time.After(every * time.Duration(i) / time.Duration(len(clusters))):
			case <-ctx.Done():
				return
			}
			// Ready at the start; a flip at a time, stopping only Ready.
			for ready := true; time.Now().Before(end) || !ready; {
				ready = !ready
				at, err := writeProbe(ctx, c, ready)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", named[c], err)
					return
				}
				mu.Lock()
				changes = append(changes, probeChange{cluster: named[c], ready: ready, at: at})
				mu.Unlock()
				// A full interval after the write, however long it took: two
				// flips closer than the monitor's coalescing window would
				// report one state, not lose a change.
				select {
				case <-time.After(every):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return changes
}

// matchChanges returns each matched change's change → callback latency,
// and how many changes no callback named.
func matchChanges(posts []post, changes []probeChange) (lat []time.Duration, lost int) {
	for _, c := range changes {
		found := false
		for _, p := range posts {
			if p.at.Before(c.at) {
				continue
			}
			// ready-status is Ready, or why not (Pending: containers not ready).
			if e := entry(p.doc.Changes.Modified, "Pod", c.cluster, "probe"); e != nil && (e["ready-status"] == "Ready") == c.ready {
				lat, found = append(lat, p.at.Sub(c.at)), true
				break
			}
		}
		if !found {
			lost++
		}
	}
	return lat, lost
}

// waitSubscribed flips c's probe until a callback comes: a new
// subscription has no initial POST, and its worker's baseline is taken
// when it starts. The probe ends Ready, its callback delivered.
func waitSubscribed(b *testing.B, hk *hook, c *simcluster.Cluster) {
	for range 10 {
		n0 := len(mustPosts(hk))
		setProbe(b, c, false)
		for deadline := time.Now().Add(10 * time.Second); len(mustPosts(hk)) == n0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond) // polling with a deadline
		}
		n1 := len(mustPosts(hk))
		setProbe(b, c, true)
		if n1 > n0 {
			hk.waitPost(n1, "the probe back Ready", func(post) bool { return true })
			return
		}
	}
	b.Fatal("no callback for the churn subscription")
}

// waitWatched polls the replica set through r until every cluster's
// watcher runs on a replica other than gone, and returns how long since
// from.
func waitWatched(b *testing.B, r *haReplica, gone string, n int, from time.Time) time.Duration {
	for {
		watched := map[string]bool{}
		for _, rep := range r.replicaSet() {
			if rep.ID == gone {
				continue
			}
			for _, c := range rep.Clusters {
				watched[c] = true
			}
		}
		if len(watched) == n {
			return time.Since(from)
		}
		if time.Since(from) > 5*time.Minute {
			b.Fatalf("%d of %d clusters watched 5 minutes after %s was killed", len(watched), n, gone)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}
