package notify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// resourceKey is a status entry's key for resource i on a cluster.
func resourceKey(cluster string, i int) string {
	return status.ResourceKey{App: "app", ClusterProvider: "p", Cluster: cluster, Version: "v1", Kind: "ConfigMap",
		Namespace: "default", Name: fmt.Sprint("cm", i)}.String()
}

// waitDelivered polls until the state has no pending payload.
func waitDelivered(t *testing.T, states *States, key string) State {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, err := states.Load(context.Background(), key)
		if err == nil && st.Pending == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery was never recorded: %+v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// A delivery writes the digests of the clusters it changed and the
// subscription's small state, never every cluster's.
func TestDeliveryWritesOnlyTheChangedCluster(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{}}
	for _, c := range []string{"c0", "c1", "c2"} {
		for i := range 2 {
			w.set(resourceKey(c, i), "1")
		}
	}
	key := testenv.UniqueName("sub")
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	revs := func() map[string]int64 {
		resp, err := env.Etcd.Client.Get(ctx, states.shardPrefix(key), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range resp.Kvs {
			out[strings.TrimPrefix(string(kv.Key), states.shardPrefix(key))] = kv.ModRevision
		}
		return out
	}
	before := revs()
	if len(before) != 3 {
		t.Fatalf("baseline shards = %v, want one per cluster", before)
	}
	w.set(resourceKey("c1", 0), "2")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 1 || len(p.changes.Modified) != 1 {
		t.Fatalf("POST = %+v", p)
	}
	st := waitDelivered(t, states, key)
	after := revs()
	for sh, rev := range before {
		if changed := after[sh] != rev; changed != (sh == "p+c1") {
			t.Errorf("shard %s rewritten = %v, want only p+c1's", sh, changed)
		}
	}
	if len(st.Delivered) != 6 || st.Delivered[resourceKey("c1", 0)] != "2" {
		t.Fatalf("delivered = %v", st.Delivered)
	}
	meta, err := env.Etcd.Client.Get(ctx, states.prefix+key)
	if err != nil || len(meta.Kvs) != 1 || strings.Contains(string(meta.Kvs[0].Value), "cm1") {
		t.Fatalf("the state value holds digests: %s %v", meta.Kvs, err)
	}
	// A cluster whose resources all went loses its shard.
	w.set(resourceKey("c2", 0), "")
	w.set(resourceKey("c2", 1), "")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Deleted) != 2 {
		t.Fatalf("POST = %+v", p)
	}
	waitDelivered(t, states, key)
	if _, ok := revs()["p+c2"]; ok {
		t.Fatal("the emptied cluster's shard is still there")
	}
}

// A subject of 6,000 resources (once past etcd's request limit as one
// value) with an envelope too large to freeze in etcd: changes are
// delivered, and a payload pending across a restart comes again with its
// id, sequence and changes, in a fresh envelope.
func TestLargeSubjectSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{}, envelope: map[string]any{"apps": strings.Repeat("x", MaxFrozenEnvelope+1)}}
	for c := range 1200 {
		for i := range 5 {
			w.set(resourceKey(fmt.Sprint("c", c), i), "1")
		}
	}
	key := testenv.UniqueName("sub")
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	rcv.answer.Store(503)
	w.set(resourceKey("c7", 3), "2")
	r.w.Notify()
	first := rcv.next(t)
	r.stop(t) // the owner goes away with the delivery pending
	meta, err := env.Etcd.Client.Get(ctx, states.prefix+key)
	if err != nil || len(meta.Kvs) != 1 || len(meta.Kvs[0].Value) > 4096 {
		t.Fatalf("the pending state is not compact: %d bytes, %v", len(meta.Kvs[0].Value), err)
	}
	w.envelope = map[string]any{"apps": strings.Repeat("y", MaxFrozenEnvelope+1)}
	rcv.answer.Store(200)
	r = startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	p := rcv.nextDelivered(t)
	if p.id != first.id || p.sequence != 1 || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != resourceKey("c7", 3) {
		t.Fatalf("after restart: %+v, want the pending delivery %+v", p, first)
	}
	st := waitDelivered(t, states, key)
	if len(st.Delivered) != 6000 || st.Delivered[resourceKey("c7", 3)] != "2" {
		t.Fatalf("delivered: %d digests, c7's = %q", len(st.Delivered), st.Delivered[resourceKey("c7", 3)])
	}
	w.set(resourceKey("c9", 0), "2")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != resourceKey("c9", 0) {
		t.Fatalf("next POST = %+v", p)
	}
}

// A state an earlier version saved (every digest and the whole payload in
// one value) is resumed: its payload resent as frozen, its digests moved
// to shards.
func TestEarlierStateLayoutIsResumed(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	rcv := newReceiver(t)
	key := testenv.UniqueName("sub")
	old := `{"sequence":3,"delivered":{"a":"1","b":"1"},"attempts":1,"pending":{"id":"old","sequence":3,` +
		`"timestamp":"2026-01-01T00:00:00Z","body":{"resource-changes":{"created":[],"deleted":[],"modified":[{"name":"a"}]}},"next":{"a":"2","b":"1"}}}`
	if _, err := env.Etcd.Client.Put(ctx, states.prefix+key, old); err != nil {
		t.Fatal(err)
	}
	w := &world{entries: map[string]string{"a": "2", "b": "1"}}
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	if p := rcv.nextDelivered(t); p.id != "old" || p.sequence != 3 || len(p.changes.Modified) != 1 {
		t.Fatalf("resumed POST = %+v", p)
	}
	st := waitDelivered(t, states, key)
	if len(st.Delivered) != 2 || st.Delivered["a"] != "2" {
		t.Fatalf("delivered = %v", st.Delivered)
	}
	meta, err := env.Etcd.Client.Get(ctx, states.prefix+key)
	if err != nil || strings.Contains(string(meta.Kvs[0].Value), `"delivered"`) {
		t.Fatalf("the digests stayed inline: %s %v", meta.Kvs, err)
	}
	w.set("c", "1")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 4 || len(p.changes.Created) != 1 || len(p.changes.Modified) != 0 {
		t.Fatalf("next POST = %+v", p)
	}
}
