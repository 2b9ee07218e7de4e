package appcontext

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkCacheVisibility measures how long a write takes to show in a
// cache fed by an etcd watch: what bounds how soon one orchestrator
// replica sees what another wrote (each replica keeps such a cache).
//
//	go test ./src/internal/appcontext -run '^$' -bench CacheVisibility -benchtime 500x
func BenchmarkCacheVisibility(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	cache := runCache(b, s)
	<-cache.Ready()
	id := NewID()
	if err := s.Create(ctx, Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Created: time.Now().UTC()}, Status{Status: Instantiating}, nil); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		resp, err := env.Etcd.Client.Put(ctx, s.statusKey(id), `{"status":"Updating","error":"`+time.Now().String()+`"}`)
		if err != nil {
			b.Fatal(err)
		}
		if err := cache.WaitRevision(ctx, resp.Header.Revision); err != nil {
			b.Fatal(err)
		}
		// From the write's start: by the time a writer's answer is back,
		// the watch has usually delivered it already.
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
