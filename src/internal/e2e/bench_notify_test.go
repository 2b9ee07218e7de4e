package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// benchDIG instantiates the 3-app DIG with monitors running and returns
// the orchestrator and the name of a frontend pod on cluster1.
func benchDIG(b *testing.B) (*orch, string) {
	startMonitors(b, sim)
	o := startOrchestratorTB(b, testenv.UniqueName("nb"), "/"+testenv.UniqueName("nb"), func(o *orchestrator.Options) {
		o.CallbackAllow = []string{"127.0.0.1"} // the benchmark's receiver
	})
	onboard(b, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	o.waitStatus("type=cluster", "every resource ready", everythingReady)
	id := o.digState().ContextID
	b.Cleanup(func() {
		o.must(202, "POST", digPath+"/terminate", nil)
		o.waitContext(id, "terminated", allResources("Deleted"))
	})
	pods, err := sim.Cluster("cluster1").Clientset().CoreV1().Pods("default").List(context.Background(),
		metav1.ListOptions{LabelSelector: "emco/deployment-id=" + id + "-frontend"})
	if err != nil || len(pods.Items) == 0 {
		b.Fatalf("frontend pods: %v", err)
	}
	return o, pods.Items[0].Name
}

// flip drives the pod not-ready or ready again and returns when it was asked.
func flip(b *testing.B, pod string, notReady bool) time.Time {
	state := "ready"
	if notReady {
		state = "not-ready"
	}
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, simcluster.StateAnnotation, state)
	if _, err := sim.Cluster("cluster1").Clientset().CoreV1().Pods("default").Patch(context.Background(), pod,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	return start
}

func hasPodChange(pod string) func(post) bool {
	return func(p post) bool { return entry(p.doc.Changes.Modified, "Pod", "cluster1", pod) != nil }
}

// BenchmarkChangeToCallback: a pod's readiness flips on a simulated
// cluster; the time until the subscriber's callback receives the
// notification naming it (kwok → monitor → ResourceBundleState → watcher
// → etcd → cache → notifier → POST). 20 isolated changes per iteration;
// targets p50 ≤ 300 ms, p99 ≤ 1 s.
func BenchmarkChangeToCallback(b *testing.B) {
	o, pod := benchDIG(b)
	h := newHook(b, "ok")
	o.must(201, "POST", digPath+"/status/subscriptions", map[string]any{"name": "bench", "callback-url": h.url()})
	// The last bundle snapshot the watcher wrote splits the latency into
	// the cluster side (kwok, monitor) and the orchestrator side.
	ctx, cancel := context.WithCancel(context.Background())
	var lastWrite atomic.Int64
	w := stores.Etcd.Client.Watch(ctx, o.prefix+"/ctx/", clientv3.WithPrefix())
	watching := make(chan struct{})
	defer func() {
		cancel()
		<-watching
	}()
	go func() {
		defer close(watching)
		for resp := range w {
			for _, ev := range resp.Events {
				if strings.HasSuffix(string(ev.Kv.Key), "/bundle") {
					lastWrite.Store(time.Now().UnixNano())
				}
			}
		}
	}()
	var lat, orchestrator []time.Duration
	notReady := false
	// Changes come one a second, as isolated changes do: back to back, the
	// monitor's --min-write-interval (500 ms per bundle) would be measured
	// instead of the pipeline.
	pace := time.NewTicker(time.Second)
	defer pace.Stop()
	for b.Loop() {
		for range 20 {
			<-pace.C
			notReady = !notReady
			n := len(mustPosts(h))
			start := flip(b, pod, notReady)
			p := h.waitPost(n, "for the flipped pod", hasPodChange(pod))
			lat = append(lat, p.at.Sub(start))
			orchestrator = append(orchestrator, p.at.Sub(time.Unix(0, lastWrite.Load())))
		}
	}
	flip(b, pod, false)
	reportPercentiles(b, lat)
	sort.Slice(orchestrator, func(i, j int) bool { return orchestrator[i] < orchestrator[j] })
	b.ReportMetric(float64(orchestrator[len(orchestrator)/2].Microseconds())/1000, "snapshot-to-callback-p50-ms")
}

// BenchmarkDeliverTo1000Subscribers: 1,000 subscriptions on one DIG; the
// time from one pod change to the last of the 1,000 callbacks receiving it.
func BenchmarkDeliverTo1000Subscribers(b *testing.B) {
	o, pod := benchDIG(b)
	h := newHook(b, "ok")
	created := time.Now()
	for i := range 1000 {
		o.must(201, "POST", digPath+"/status/subscriptions", map[string]any{"name": fmt.Sprintf("s%04d", i),
			"callback-url": fmt.Sprintf("%s/s/%d", h.srv.URL, i)})
	}
	b.Logf("1,000 subscriptions created in %s", time.Since(created).Round(time.Millisecond))
	notReady := false
	var took []time.Duration
	for b.Loop() {
		notReady = !notReady
		n := len(mustPosts(h))
		start := flip(b, pod, notReady)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			posts := mustPosts(h)
			got := 0
			var last time.Time
			for _, p := range posts[n:] {
				if hasPodChange(pod)(p) {
					got++
					last = p.at
				}
			}
			if got >= 1000 {
				took = append(took, last.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("only %d of 1,000 subscribers were notified", got)
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	flip(b, pod, false)
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(took)), "ms/change-to-all-1000")
}
