package notify

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
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

// frozenKeys counts the chunks kept for a subscription's pending payload.
func frozenKeys(t *testing.T, states *States, key string) int64 {
	t.Helper()
	resp, err := env.Etcd.Client.Get(context.Background(), states.frozenPrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// A subject of 6,000 resources (once past etcd's request limit as one
// value) whose pending payload is too large for the state's value (an
// envelope well over MaxInlinePart, changes over 2 MiB): a payload pending
// across a restart is resent byte for byte, and once answered leaves no
// chunk behind.
func TestLargeSubjectSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{}, pad: map[string]int{},
		envelope: map[string]any{"apps": hex.EncodeToString(randomBytes(100 << 10))}}
	for c := range 1200 {
		for i := range 5 {
			w.set(resourceKey(fmt.Sprint("c", c), i), "1")
		}
	}
	key := testenv.UniqueName("sub")
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	rcv.answer.Store(503)
	// Every resource changes (a DIG's first delivery after an update):
	// the digests the payload brings are too many for the state's value.
	for c := range 1200 {
		for i := range 5 {
			w.set(resourceKey(fmt.Sprint("c", c), i), "2")
		}
	}
	for c := range 40 {
		w.pad[resourceKey(fmt.Sprint("c", c), 3)] = 64 << 10
	}
	r.w.Notify()
	first := rcv.next(t)
	r.stop(t) // the owner goes away with the delivery pending
	meta, err := env.Etcd.Client.Get(ctx, states.prefix+key)
	if err != nil || len(meta.Kvs) != 1 || len(meta.Kvs[0].Value) > 8192 {
		t.Fatalf("the pending state is not compact: %d bytes, %v", len(meta.Kvs[0].Value), err)
	}
	if len(first.body) < 2<<20 || frozenKeys(t, states, key) < 4 {
		t.Fatalf("a %d-byte payload is kept in %d chunks", len(first.body), frozenKeys(t, states, key))
	}
	// A GET's view, or a load that does not resume the delivery, does not
	// read the chunks.
	view, _, err := states.LoadView(ctx, key)
	if err != nil || view.Pending == nil || view.Pending.ChangesRef == nil || view.Pending.DeltaRef == nil ||
		view.Pending.Changes != nil || view.Pending.Envelope != nil || view.Pending.Delta != nil {
		t.Fatalf("the view read the chunks: %+v %v", view.Pending, err)
	}
	w.envelope = map[string]any{"apps": "newer"}
	rcv.answer.Store(200)
	r = startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	p := rcv.nextDelivered(t)
	if p.id != first.id || p.sequence != 1 || !bytes.Equal(p.body, first.body) {
		t.Fatalf("after restart: %s #%d (%d bytes), want the pending delivery %s #%d (%d bytes) unchanged",
			p.id, p.sequence, len(p.body), first.id, first.sequence, len(first.body))
	}
	st := waitDelivered(t, states, key)
	if len(st.Delivered) != 6000 || st.Delivered[resourceKey("c7", 3)] != "2" || st.Delivered[resourceKey("c1199", 4)] != "2" {
		t.Fatalf("delivered: %d digests, c7's = %q, c1199's = %q", len(st.Delivered), st.Delivered[resourceKey("c7", 3)], st.Delivered[resourceKey("c1199", 4)])
	}
	if n := frozenKeys(t, states, key); n != 0 {
		t.Fatalf("the answered payload left %d chunks", n)
	}
	w.set(resourceKey("c999", 0), "3")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != resourceKey("c999", 0) {
		t.Fatalf("next POST = %+v", p)
	}
}

// A pending payload whose chunks are missing or corrupt is dropped, not
// resent and not fatal to the worker: its changes come with the next
// payload. That one takes the lost payload's sequence number only when
// the lost one was never POSTed; after an attempt the subscriber may hold
// a body under that number, so the next moves on to the one after.
func TestLostFrozenPartDropsPayload(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	spoils := map[string]func(prefix string) error{
		"missing": func(prefix string) error {
			_, err := env.Etcd.Client.Delete(ctx, prefix, clientv3.WithPrefix())
			return err
		},
		"corrupt": func(prefix string) error {
			_, err := env.Etcd.Client.Put(ctx, prefix+"1/envelope/000000", "\x1f\x8bnot gzip")
			return err
		},
	}
	for name, spoil := range spoils {
		for _, attempted := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/attempted=%v", name, attempted), func(t *testing.T) {
				rcv := newReceiver(t)
				w := &world{entries: map[string]string{"a": "1", "b": "1"},
					envelope: map[string]any{"apps": hex.EncodeToString(randomBytes(MaxInlinePart))}}
				key := testenv.UniqueName("sub")
				r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
				rcv.answer.Store(503)
				w.set("a", "2")
				r.w.Notify()
				first := rcv.next(t)
				r.stop(t)
				if !attempted {
					// As a process leaves it whose save after the POST
					// failed (or that stopped before the POST): a stored
					// Attempts of 0 does not prove the subscriber never
					// received the body, so the number is not reused.
					forgetAttempts(t, states, key)
				}
				if err := spoil(states.frozenPrefix(key)); err != nil {
					t.Fatal(err)
				}
				const want = 2
				rcv.answer.Store(200)
				r = startWorker(t, states, key, w.source, rcv.srv.URL, 0)
				p := rcv.nextDelivered(t)
				if p.id == first.id || p.sequence != want || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != "a" {
					t.Fatalf("after the loss: %s #%d %+v, want a new payload #%d with a's change", p.id, p.sequence, p.changes, want)
				}
				waitDelivered(t, states, key)
				w.set("b", "2")
				r.w.Notify()
				if p := rcv.nextDelivered(t); p.sequence != want+1 || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != "b" {
					t.Fatalf("next POST = %s #%d %+v, want #%d", p.id, p.sequence, p.changes, want+1)
				}
				waitDelivered(t, states, key)
				if n := frozenKeys(t, states, key); n != 0 {
					t.Fatalf("answered payloads left %d chunks", n)
				}
			})
		}
	}
}

// forgetAttempts rewrites a stored state as if its pending payload had
// never been POSTed.
func forgetAttempts(t *testing.T, states *States, key string) {
	t.Helper()
	ctx := context.Background()
	resp, err := env.Etcd.Client.Get(ctx, states.prefix+key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("state of %s: %v", key, err)
	}
	var st map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	if st["attempts"] == float64(0) || st["pending"] == nil {
		t.Fatalf("the state has no attempted pending payload: %s", resp.Kvs[0].Value)
	}
	st["attempts"] = 0
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Client.Put(ctx, states.prefix+key, string(data)); err != nil {
		t.Fatal(err)
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

// A newer payload's chunks, written before the state that would name it,
// leave the older payload's alone: a process that stops between the two
// writes leaves etcd naming the older payload, which is resent whole.
func TestNewerChunksLeaveTheNamedPayload(t *testing.T) {
	ctx := context.Background()
	states := statesFor(t)
	key := testenv.UniqueName("sub")
	big := func(c string) json.RawMessage {
		return json.RawMessage(`{"apps":"` + strings.Repeat(c, MaxInlinePart+1) + `"}`)
	}
	older := &Pending{ID: "a", Sequence: 1, Envelope: big("a"), Changes: json.RawMessage(`{"resource-changes":{}}`)}
	if err := states.SaveIf(ctx, key, State{Sequence: 1, Pending: older}); err != nil {
		t.Fatal(err)
	}
	newer := &Pending{ID: "b", Sequence: 2, Envelope: big("b"), Changes: json.RawMessage(`{"resource-changes":{}}`)}
	if err := states.spill(ctx, key, newer, nil); err != nil { // the process stops here
		t.Fatal(err)
	}
	st, _, err := states.LoadWhole(ctx, key)
	if err != nil || st.Pending == nil || st.Pending.ID != "a" || !bytes.Equal(st.Pending.Envelope, older.Envelope) {
		t.Fatalf("the named payload after a newer one's chunks: %v", err)
	}
	// Once a state names the newer payload, the older chunks go with it.
	if err := states.SaveIf(ctx, key, State{Sequence: 2, Pending: newer}); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Etcd.Client.Get(ctx, states.seqPrefix(key, 1), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("the older payload's chunks once the newer is named: %v %v", resp, err)
	}
	if st, _, err := states.LoadWhole(ctx, key); err != nil || st.Pending.ID != "b" || !bytes.Equal(st.Pending.Envelope, newer.Envelope) {
		t.Fatalf("the newer payload: %v", err)
	}
}

// TestShardIndexFollowsDeliveries: the shards a delivery writes, taken
// from the index kept across deliveries, are those a walk of every
// delivered digest finds.
func TestShardIndexFollowsDeliveries(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	key := func() string {
		return status.ResourceKey{App: "a", ClusterProvider: "cp", Cluster: fmt.Sprintf("c%d", rng.IntN(5)), Kind: "ConfigMap",
			Name: fmt.Sprintf("n%d", rng.IntN(6))}.String()
	}
	st := State{Delivered: map[string]string{key(): "0", key(): "1"}}
	st.indexShards()
	for range 300 {
		p := &Pending{Delta: map[string]string{}}
		for range rng.IntN(4) {
			p.Delta[key()] = fmt.Sprint(rng.IntN(3))
		}
		for range rng.IntN(3) {
			if k := key(); p.Delta[k] == "" {
				p.Gone = append(p.Gone, k)
			}
		}
		st.delivered(p)
		want := map[string]bool{}
		for _, k := range p.touched() {
			want[shardOf(k)] = true
		}
		walked := State{Delivered: st.Delivered}
		if got, exp := st.shards(want, false), walked.shards(want, false); !reflect.DeepEqual(got, exp) {
			t.Fatalf("from the index %v, walking %v", got, exp)
		}
	}
}
