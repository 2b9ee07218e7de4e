package appcontext

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// placementKeys are the keys and values one placement of five ConfigMaps
// has under its context once Applied and reported Ready, as the fleet
// benchmark's clusters leave them: each resource's manifest reference and
// status, and the bundle snapshot.
func placementKeys(cluster string) (keys []string, values [][]byte) {
	base := "app/fleet/cluster/fleet+" + cluster + "/"
	var entries []map[string]any
	for i := range 5 {
		name := fmt.Sprintf("cm-%d", i)
		r := Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Namespace: "default", Order: i,
			ManifestRef: &BlobRef{SHA256: fmt.Sprintf("%064x", i), Size: 300, Chunks: 1}}
		st := ResourceStatus{Status: "Applied", Manifest: fmt.Sprintf("%064x", i), Fields: fmt.Sprintf("%064x", i+100), Updated: time.Now().UTC()}
		rv, _ := json.Marshal(r)
		sv, _ := json.Marshal(st)
		keys = append(keys, base+"res/"+r.Key()+"/manifest", base+"res/"+r.Key()+"/status")
		values = append(values, rv, sv)
		entries = append(entries, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "readyStatus": "Ready",
			"managedFieldsHash": fmt.Sprintf("%064x", i+100),
			"metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": "1234",
				"labels": map[string]string{"emco/deployment-id": "1234567890-fleet", "app.kubernetes.io/managed-by": "argus"}}})
	}
	status, _ := json.Marshal(map[string]any{"ready": true, "resourceCount": 5, "configMapStatuses": entries})
	snap, _ := json.Marshal(BundleSnapshot{ResourceVersion: "1234", Status: status, Received: time.Now().UTC()})
	return append(keys, base+"bundle"), append(values, snap)
}

// BenchmarkCacheHeapPerPlacement reports the heap the cache's builder
// holds for each placement of five ConfigMaps with their statuses and
// bundle (the fleet benchmark's placement): every replica holds one per
// cluster of the fleet.
//
//	go test ./src/internal/appcontext -run '^$' -bench CacheHeapPerPlacement -benchtime 3x
func BenchmarkCacheHeapPerPlacement(b *testing.B) {
	const n = 2000
	var keys [][]string
	var values [][][]byte
	for i := range n {
		k, v := placementKeys(fmt.Sprintf("c%05d", i))
		keys, values = append(keys, k), append(values, v)
	}
	var perPlacement float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		bld := newLeanBuilder()
		for i := range keys {
			for j, k := range keys[i] {
				if err := bld.applyPlacementKey(k, values[i][j], false); err != nil {
					b.Fatal(err)
				}
			}
		}
		bld.resolve()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if len(bld.ctx.Placements) != n {
			b.Fatalf("%d placements", len(bld.ctx.Placements))
		}
		perPlacement = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(bld)
	}
	b.ReportMetric(perPlacement, "heap-B/placement")
}
