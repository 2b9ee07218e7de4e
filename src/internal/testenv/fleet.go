package testenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// FleetLine is the one line a fleet-scale benchmark prints per size
// (issue 26): the pull fleet's (fleetsim.BenchmarkFleet) and the push
// clusters' (e2e.BenchmarkHAScale), so docs/benchmarks.md can set them
// side by side and outside checks parse both alike.
type FleetLine struct {
	// Mode is "" for pull clusters (the line issue 26's contract names,
	// "fleet: clusters=…") and "push" for API-server clusters with
	// monitors ("fleet: mode=push clusters=…").
	Mode                             string
	Clusters, Replicas               int
	RSSKiB, CPUMs                    float64 // per idle cluster; CPU a minute
	Reconnect, Instantiate           time.Duration
	SummaryP50, AllP50, CbP50, CbP99 time.Duration
	// EtcdKeys and EtcdBytes are what etcd took per change under churn
	// (-1 when not measured).
	EtcdKeys, EtcdBytes float64
	// SettledRSSKiB is RSSKiB again once the idle fleet has been left for
	// the Go runtime's own forced-GC period and more; 0 when not measured
	// (and then not printed).
	SettledRSSKiB float64
	Lost          int
}

func (r FleetLine) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) }
	mode, settled := "", ""
	if r.Mode != "" {
		mode = "mode=" + r.Mode + " "
	}
	if r.SettledRSSKiB > 0 {
		settled = fmt.Sprintf("rss_settled_kib_per_cluster=%.1f ", r.SettledRSSKiB)
	}
	return fmt.Sprintf("fleet: %sclusters=%d replicas=%d rss_kib_per_cluster=%.1f cpu_ms_per_min_per_cluster=%.2f reconnect_s=%.1f "+
		"instantiate_s=%.1f status_summary_p50_ms=%s status_all_p50_ms=%s callback_p50_ms=%s callback_p99_ms=%s "+
		"etcd_keys_per_change=%.1f etcd_bytes_per_change=%.0f %slost=%d",
		mode, r.Clusters, r.Replicas, r.RSSKiB, r.CPUMs, r.Reconnect.Seconds(), r.Instantiate.Seconds(),
		ms(r.SummaryP50), ms(r.AllP50), ms(r.CbP50), ms(r.CbP99), r.EtcdKeys, r.EtcdBytes, settled, r.Lost)
}

// CountWrites watches every etcd key from now until the returned stop is
// called, and returns how many keys were put or deleted and their bytes
// (key and value): all a deployment wrote meanwhile.
func CountWrites(endpoints ...string) (stop func() (keys, bytes int64), err error) {
	stopBy, err := CountWritesByPrefix(endpoints...)
	if err != nil {
		return nil, err
	}
	return func() (int64, int64) {
		var keys, bytes int64
		for _, w := range stopBy() {
			keys, bytes = keys+w.Keys, bytes+w.Bytes
		}
		return keys, bytes
	}, nil
}

// Writes is what etcd took under one key prefix: keys put or deleted,
// their bytes, and the transactions (revisions) that wrote them.
type Writes struct {
	Keys, Bytes, Txns int64
}

// CountWritesByPrefix is CountWrites by key prefix (a key's first three
// path segments, "/argus/fleet/work"): where a deployment's writes go.
func CountWritesByPrefix(endpoints ...string) (stop func() map[string]Writes, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	by := map[string]Writes{}
	ch := cli.Watch(ctx, "", clientv3.WithPrefix())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range ch {
			mu.Lock()
			seen := map[string]int64{}
			for _, ev := range resp.Events {
				p := keyPrefix(string(ev.Kv.Key))
				w := by[p]
				w.Keys++
				w.Bytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
				if seen[p] != ev.Kv.ModRevision {
					seen[p] = ev.Kv.ModRevision
					w.Txns++
				}
				by[p] = w
			}
			mu.Unlock()
		}
	}()
	return func() map[string]Writes {
		cancel()
		<-done
		_ = cli.Close()
		mu.Lock()
		defer mu.Unlock()
		return by
	}, nil
}

// keyPrefix is a key's first three path segments.
func keyPrefix(key string) string {
	n := 0
	for i := range len(key) {
		if key[i] == '/' {
			if n++; n == 4 {
				return key[:i]
			}
		}
	}
	return key
}
