package fleetsim

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/agent"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/testenv"
)

func TestMain(m *testing.M) {
	if render.IsWorker(os.Args[1:]) { // an in-process orchestrator's render workers (ARGUS_FLEET_PROFILE)
		os.Exit(render.WorkerMain(os.Args[2:]))
	}
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

// recorder is an agent.Reporter that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	statuses map[string]appcontext.ResourceStatus
	settled  bool
	bundles  []agent.Bundle
}

func (r *recorder) Statuses(_ agent.WorkKey, _ int64, st map[string]appcontext.ResourceStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.statuses == nil {
		r.statuses = map[string]appcontext.ResourceStatus{}
	}
	for k, v := range st {
		r.statuses[k] = v
	}
}

func (r *recorder) Progress(_ agent.WorkKey, _ int64, _, settled bool) {
	r.mu.Lock()
	r.settled = settled
	r.mu.Unlock()
}

func (r *recorder) Bundle(b agent.Bundle) {
	r.mu.Lock()
	r.bundles = append(r.bundles, b)
	r.mu.Unlock()
}

func (r *recorder) last(t *testing.T) (agent.Bundle, map[string]any) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bundles[len(r.bundles)-1]
	var st map[string]any
	if !b.Deleted {
		if err := json.Unmarshal(b.Status, &st); err != nil {
			t.Fatal(err)
		}
	}
	return b, st
}

func work(names ...string) agent.Work {
	w := agent.Work{Key: agent.WorkKey{Context: "42", App: "sim"}, Generation: 7, StatusID: "42", Namespace: "default"}
	for _, n := range names {
		w.Resources = append(w.Resources, agent.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Name: n, Namespace: "default", SHA256: "h-" + n})
	}
	return w
}

// runCluster runs c with r until the test ends.
func runCluster(t *testing.T, c *memCluster, r agent.Reporter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, r)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		running := c.r != nil
		c.mu.Unlock()
		if running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster did not start")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

// A placement is Applied and Ready at once; a flip turns one resource
// Pending in the bundle and says so; a deletion reports Deleted.
func TestMemClusterAppliesFlipsAndDeletes(t *testing.T) {
	c := newMemCluster("c1")
	r := &recorder{}
	c.Apply(work("a", "b")) // before Run: reported once it runs
	runCluster(t, c, r)
	if st := r.statuses["ConfigMap/default/a"]; st.Status != appcontext.RsyncApplied || st.Manifest != "h-a" || !r.settled {
		t.Fatalf("statuses %v, settled %v", r.statuses, r.settled)
	}
	b, st := r.last(t)
	if b.StatusID != "42" || b.App != "sim" || st["ready"] != true || len(st["configMapStatuses"].([]any)) != 2 {
		t.Fatalf("bundle %+v %v", b, st)
	}
	ch, ok := c.flip(1)
	if !ok || ch.Cluster != "c1" || ch.Resource != "ConfigMap/default/b" || ch.Ready || ch.At.IsZero() {
		t.Fatalf("flip: %+v %v", ch, ok)
	}
	_, st = r.last(t)
	entry := st["configMapStatuses"].([]any)[1].(map[string]any)
	if st["ready"] != false || entry["readyStatus"] != "Pending" {
		t.Fatalf("after the flip: %v", st)
	}
	del := work("a", "b")
	del.Delete, del.Generation = true, 8
	c.Apply(del)
	if b, _ := r.last(t); !b.Deleted || r.statuses["ConfigMap/default/a"].Status != appcontext.RsyncDeleted {
		t.Fatalf("after the deletion: %+v %v", b, r.statuses)
	}
	if _, ok := c.flip(0); ok {
		t.Fatal("a cluster holding nothing flipped something")
	}
}

// Churn makes changes at its rate, clusters in turn, and counts each one.
func TestChurnCountsEveryChange(t *testing.T) {
	f := &Fleet{opts: Options{Seed: 3}, byName: map[string]*simCluster{}}
	recs := map[string]*recorder{}
	for _, n := range []string{"c1", "c2", "c3"} {
		c := &simCluster{name: n, kube: newMemCluster(n)}
		recs[n] = &recorder{}
		c.kube.Apply(work("a", "b"))
		runCluster(t, c.kube, recs[n])
		f.clusters = append(f.clusters, c)
	}
	f.SetChurn(6000) // 300 changes a second over 3 clusters
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.runChurn(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(f.Changes()) < 30 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	cancel()
	<-done
	changes := f.Changes()
	if len(changes) < 30 {
		t.Fatalf("%d changes in 30s", len(changes))
	}
	bundles := 0
	for _, r := range recs {
		r.mu.Lock()
		bundles += len(r.bundles) - 1 // the first came with the apply
		r.mu.Unlock()
	}
	if bundles != len(changes) {
		t.Fatalf("%d changes counted, %d bundles reported", len(changes), bundles)
	}
	// Each cluster's resources in turn: a resource's next change flips it back.
	last := map[string]bool{}
	for _, ch := range changes {
		k := ch.Cluster + "/" + ch.Resource
		if prev, ok := last[k]; ok && prev == ch.Ready {
			t.Fatalf("%s changed to %v twice in a row", k, ch.Ready)
		}
		last[k] = ch.Ready
	}
}
