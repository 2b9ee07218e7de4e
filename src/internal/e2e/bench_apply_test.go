package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// BenchmarkApply20Apps and BenchmarkApply50Apps: a DIG of 20 (50) small
// apps, 3 resources each, on both clusters: from the instantiate call to
// the status API answering every resource Applied (120 and 300 resources).
// Targets (issue 15): ≤ 1 s and ≤ 2 s. Phases, per iteration:
//
//   - plan: the catalogue reads and Helm rendering of every app;
//   - store: writing the AppContext to etcd;
//   - call: the whole instantiate request (plan, store, state transition);
//   - apply <cluster>: from the call's answer to the last resource applied
//     on that cluster (the time rsync recorded);
//   - record: from the last resource applied to its status in etcd (the
//     batched status write);
//   - answer: from there to the status API saying so (the cache's etcd
//     watch; the API is polled every 2 ms once etcd has it all).
//
// Each iteration terminates the previous instantiation first, untimed.
func BenchmarkApply20Apps(b *testing.B) { benchApply(b, 20) }

func BenchmarkApply50Apps(b *testing.B) { benchApply(b, 50) }

func benchApply(b *testing.B, n int) {
	phases := &phaseHook{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.AddHook(phases)
	db, prefix := testenv.UniqueName("bench"), "/"+testenv.UniqueName("bench")
	o := startOrchestratorTB(b, db, prefix, func(opts *orchestrator.Options) { opts.Logger = log })
	chart := testenv.Archive(b, filepath.Join("testdata/charts", "frontend"))
	charts := map[string][]byte{}
	for i := range n {
		charts[fmt.Sprintf("app%02d", i)] = chart
	}
	onboardApps(b, o, charts, nil)
	o.must(202, "POST", digPath+"/approve", nil)
	total := 3 * n * len(sim.Clusters)

	var sum time.Duration
	sums := map[string]time.Duration{}
	counts := map[string]int{}
	for b.Loop() {
		b.StopTimer()
		if st := o.digState(); st.Current == "Instantiated" {
			o.must(202, "POST", digPath+"/terminate", nil)
			o.waitContext(st.ContextID, "terminated", func(c *appcontext.Context) (bool, string) {
				return c.Status.Status == appcontext.Terminated, c.Status.Status
			})
		}
		// Count etcd writes (keys put, transactions) under the orchestrator's prefix.
		wctx, stopWatch := context.WithCancel(context.Background())
		var puts int
		revs := map[int64]bool{}
		watched := make(chan struct{})
		w := stores.Etcd.Client.Watch(wctx, prefix+"/", clientv3.WithPrefix())
		go func() {
			defer close(watched)
			for resp := range w {
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						puts++
						revs[ev.Kv.ModRevision] = true
					}
				}
			}
		}()
		b.StartTimer()
		start := time.Now()
		o.must(202, "POST", digPath+"/instantiate", nil)
		answered := time.Now()
		recorded, seen := waitAllApplied(b, o, total)
		took := seen.Sub(start)
		b.StopTimer()
		sum += took
		o.waitContext(o.digState().ContextID, "Instantiated", func(c *appcontext.Context) (bool, string) {
			return c.Status.Status == appcontext.Instantiated, c.Status.Status
		})
		stopWatch()
		<-watched
		counts["etcd-puts"] += puts
		counts["etcd-txns"] += len(revs)
		id := o.digState().ContextID
		last, lastAll := lastApplied(mustContextTB(b, o, id))
		plan, store := phases.last()
		sums["plan"] += plan
		sums["store"] += store
		sums["call"] += answered.Sub(start)
		for cl, t := range last {
			sums["apply-"+cl] += t.Sub(answered)
		}
		sums["record"] += recorded.Sub(lastAll)
		sums["answer"] += seen.Sub(recorded)
		b.Logf("%d apps, %d resources: all Applied after %s (plan %s, store %s, call %s, apply%v after the call, "+
			"recorded in etcd %s later, status API %s later)",
			n, total, took.Round(time.Millisecond), plan, store, answered.Sub(start).Round(time.Millisecond),
			applyTimes(last, answered), recorded.Sub(lastAll).Round(time.Millisecond), seen.Sub(recorded).Round(time.Millisecond))
		b.StartTimer()
	}
	b.ReportMetric(sum.Seconds()/float64(b.N), "s-to-all-applied")
	names := make([]string, 0, len(sums))
	for k := range sums {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.ReportMetric(float64(sums[k].Milliseconds())/float64(b.N), k+"-ms")
	}
	for k, n := range counts {
		b.ReportMetric(float64(n)/float64(b.N*total), k+"/resource")
	}
}

// lastApplied is when rsync recorded the last resource of each cluster,
// and of all.
func lastApplied(c *appcontext.Context) (map[string]time.Time, time.Time) {
	last := map[string]time.Time{}
	var lastAll time.Time
	for _, p := range c.Placements {
		for _, r := range p.Resources {
			u := p.StatusOf(r.Key()).Updated
			if u.After(last[p.Cluster.Name]) {
				last[p.Cluster.Name] = u
			}
			if u.After(lastAll) {
				lastAll = u
			}
		}
	}
	return last, lastAll
}

// waitAllApplied follows the context's keys in etcd until every resource
// is recorded Applied, and then polls the status API (as a user would)
// until it says so too; it returns both times. Polling only at the end
// keeps the measurement from competing with what it measures.
func waitAllApplied(t testing.TB, o *orch, total int) (recorded, answered time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := o.digState().ContextID
	prefix := o.prefix + "/ctx/" + id + "/"
	resp, err := stores.Etcd.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]bool{}
	note := func(key string, value []byte) {
		if !strings.HasSuffix(key, "/status") {
			return
		}
		var st appcontext.ResourceStatus
		_ = json.Unmarshal(value, &st)
		applied[key] = st.Status == appcontext.RsyncApplied
	}
	count := func() (n int) {
		for _, ok := range applied {
			if ok {
				n++
			}
		}
		return n
	}
	for _, kv := range resp.Kvs {
		note(string(kv.Key), kv.Value)
	}
	w := stores.Etcd.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for count() < total {
		wr, ok := <-w
		if !ok || wr.Err() != nil {
			t.Fatalf("watching the context: %d of %d Applied, %v", count(), total, wr.Err())
		}
		for _, ev := range wr.Events {
			note(string(ev.Kv.Key), ev.Kv.Value)
		}
	}
	recorded = time.Now()
	last := ""
	for ctx.Err() == nil {
		code, body := o.call("GET", digPath+"/status?type=rsync&output=summary", nil)
		if code == 200 {
			var st struct {
				RsyncStatus map[string]int `json:"rsync-status"`
			}
			if json.Unmarshal([]byte(body), &st) == nil && st.RsyncStatus[appcontext.RsyncApplied] == total {
				return recorded, time.Now()
			}
		}
		last = body
		time.Sleep(2 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("the status API never said all %d resources Applied: %s", total, last)
	return recorded, time.Time{}
}

func applyTimes(last map[string]time.Time, from time.Time) string {
	names := make([]string, 0, len(last))
	for k := range last {
		names = append(names, k)
	}
	sort.Strings(names)
	out := ""
	for _, k := range names {
		out += fmt.Sprintf(" %s %s", k, last[k].Sub(from).Round(time.Millisecond))
	}
	return out
}

func mustContextTB(t testing.TB, o *orch, id string) *appcontext.Context {
	t.Helper()
	c, err := o.contexts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// phaseHook keeps the plan and store times the deploy service logs.
type phaseHook struct {
	mu          sync.Mutex
	plan, store time.Duration
}

func (h *phaseHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *phaseHook) Fire(e *logrus.Entry) error {
	if e.Message != "instantiating" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := e.Data["plan_ms"].(int64); ok {
		h.plan = time.Duration(v) * time.Millisecond
	}
	if v, ok := e.Data["store_ms"].(int64); ok {
		h.store = time.Duration(v) * time.Millisecond
	}
	return nil
}

func (h *phaseHook) last() (time.Duration, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.plan, h.store
}

// BenchmarkApplyFloor20Apps is the floor under BenchmarkApply20Apps: the
// same 120 objects (the same chart rendered for the same 20 releases)
// server-side applied straight to both clusters, every one at once (16 in
// flight per cluster), with nothing recorded anywhere. What rsync takes
// beyond it is rsync's own cost; the floor itself is the clusters'.
func BenchmarkApplyFloor20Apps(b *testing.B) {
	chart := testenv.Archive(b, filepath.Join("testdata/charts", "frontend"))
	var objs []*unstructured.Unstructured
	for i := range 20 {
		rs, err := render.Render(render.Options{Chart: chart, ReleaseName: fmt.Sprintf("floor%02d", i)})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			objs = append(objs, r.Object)
		}
	}
	type target struct {
		dyn    dynamic.Interface
		mapper apimeta.RESTMapper
	}
	var targets []target
	for _, c := range sim.Clusters {
		dyn := dynamic.NewForConfigOrDie(c.RESTConfig())
		disc := discovery.NewDiscoveryClientForConfigOrDie(c.RESTConfig())
		targets = append(targets, target{dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))})
	}
	each := func(f func(target, dynamic.ResourceInterface, *unstructured.Unstructured) error) {
		var wg sync.WaitGroup
		for _, t := range targets {
			sem := make(chan struct{}, 16)
			for _, o := range objs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					m, err := t.mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
					if err == nil {
						err = f(t, t.dyn.Resource(m.Resource).Namespace("default"), o)
					}
					if err != nil {
						b.Error(err)
					}
				}()
			}
		}
		wg.Wait()
	}
	var sum time.Duration
	for b.Loop() {
		start := time.Now()
		each(func(_ target, ri dynamic.ResourceInterface, o *unstructured.Unstructured) error {
			data, _ := o.MarshalJSON()
			_, err := ri.Patch(context.Background(), o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "floor", Force: ptr(true)})
			return err
		})
		sum += time.Since(start)
		b.StopTimer()
		each(func(_ target, ri dynamic.ResourceInterface, o *unstructured.Unstructured) error {
			return ri.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		})
		b.StartTimer()
	}
	b.ReportMetric(sum.Seconds()/float64(b.N), "s-to-all-applied")
}

func ptr[T any](v T) *T { return &v }
