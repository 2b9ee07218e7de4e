package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// BenchmarkInstantiate50Apps: a composite app of 50 apps (3 resources each)
// placed on both clusters, from the instantiate call to every one of the
// 300 resources Applied; and the etcd key writes per resource (a watch on
// the orchestrator's prefix counts every put). Target: ≤ 5 s. Each
// iteration terminates the previous instantiation first, outside the timer.
func BenchmarkInstantiate50Apps(b *testing.B) {
	db, prefix := testenv.UniqueName("bench"), "/"+testenv.UniqueName("bench")
	o := startOrchestratorTB(b, db, prefix)
	chart := testenv.Archive(b, filepath.Join("testdata/charts", "frontend"))
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	for _, c := range sim.Clusters {
		o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
		o.must(201, "POST", "/v2/cluster-providers/cp/clusters/"+c.Name+"/labels", map[string]string{"clusterLabel": "edge"})
	}
	o.must(201, "POST", "/v2/projects", meta("p1"))
	o.must(201, "POST", "/v2/projects/p1/composite-apps", obj("ca", map[string]any{"compositeAppVersion": "v1"}))
	o.must(201, "POST", caPath+"/composite-profiles", meta("cpf"))
	o.must(201, "POST", caPath+"/deployment-intent-groups", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1"}))
	o.must(201, "POST", digPath+"/generic-placement-intents", meta("gpi"))
	o.must(201, "POST", digPath+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	for i := range 50 {
		a := fmt.Sprintf("app%02d", i)
		o.uploadOK(caPath+"/apps", meta(a), chart)
		o.must(201, "POST", digPath+"/generic-placement-intents/gpi/app-intents", obj(a, map[string]any{
			"app": a, "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "clusterLabel": "edge"}}}}))
	}
	o.must(202, "POST", digPath+"/approve", nil)

	var took time.Duration
	var writes, resources int64
	for b.Loop() {
		b.StopTimer()
		if st := o.digState(); st.Current == "Instantiated" {
			o.must(202, "POST", digPath+"/terminate", nil)
			o.waitContext(st.ContextID, "terminated", allResources(appcontext.RsyncDeleted))
		}
		ctx, cancel := context.WithCancel(context.Background())
		var puts atomic.Int64
		w := stores.Etcd.Client.Watch(ctx, prefix+"/", clientv3.WithPrefix())
		watching := make(chan struct{})
		go func() {
			defer close(watching)
			for resp := range w {
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						puts.Add(1)
					}
				}
			}
		}()
		b.StartTimer()
		start := time.Now()
		o.must(202, "POST", digPath+"/instantiate", nil)
		id := o.digState().ContextID
		o.waitContext(id, "all Applied", allResources(appcontext.RsyncApplied))
		took += time.Since(start)
		b.StopTimer()
		o.waitContext(id, "Instantiated", func(c *appcontext.Context) (bool, string) {
			return c.Status.Status == appcontext.Instantiated, c.Status.Status
		})
		cancel()
		<-watching
		writes += puts.Load()
		resources += 300
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s-to-all-applied")
	b.ReportMetric(float64(writes)/float64(resources), "etcd-writes/resource")
}
