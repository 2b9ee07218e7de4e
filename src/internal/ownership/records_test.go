package ownership

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/backoff"
)

// recorder is a Records consumer: what it was told to want and drop, and
// every record handed to it.
type recorder struct {
	mu      sync.Mutex
	wanted  map[string]bool
	dropped []string
	handed  []string // "key@rev", "key@rev deleted"
	onRec   func(Record[string])
}

func newRecorder() *recorder { return &recorder{wanted: map[string]bool{}} }

func (c *recorder) Want(item string) { c.mu.Lock(); c.wanted[item] = true; c.mu.Unlock() }
func (c *recorder) Drop(item string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.wanted, item)
	c.dropped = append(c.dropped, item)
}

func (c *recorder) Changed(r Record[string]) {
	c.mu.Lock()
	s := fmt.Sprintf("%s@%d=%s", r.Key, r.ModRevision, r.Value)
	if r.Deleted {
		s = fmt.Sprintf("%s deleted", r.Key)
	}
	c.handed = append(c.handed, s)
	f := c.onRec
	c.mu.Unlock()
	if f != nil {
		f(r)
	}
}

func (c *recorder) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.handed)
}

func (c *recorder) has(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.handed, s)
}

func runRecords(t *testing.T, r *Records[string, string]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("records not listed after 30s")
	}
}

// The owner of a record's item is cut off from etcd while records change
// and etcd compacts past its watch; once back it is handed what changed
// (the deleted record as a delete, its item dropped), each revision once,
// and nothing it already had.
func TestRecordsRecoverFromACompactedGap(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	cut, proxy := env.EtcdBehindProxy(t)
	c := newRecorder()
	opts := RecordsOptions[string]{Prefix: prefix + "recs/", AckPrefix: prefix + "acks/", Layout: One, Claims: c, Owner: c,
		Retry: backoff.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}}
	opts.Client = cut
	owner, err := NewRecords[string, string](opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Client = env.Etcd.Client
	writer, err := NewRecords[string, string](opts)
	if err != nil {
		t.Fatal(err)
	}
	runRecords(t, owner)
	for _, item := range []string{"a", "b", "c"} {
		owner.Acquired(item)
	}
	revA, err := writer.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	revB, err := writer.Put(ctx, "b", "1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a and b handed over", 30*time.Second, func() (bool, string) {
		return c.has(fmt.Sprintf("a@%d=1", revA)) && c.has(fmt.Sprintf("b@%d=1", revB)), fmt.Sprint(c.list())
	})

	proxy.Cut()
	if err := writer.Delete(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	revC, err := writer.Put(ctx, "c", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Client.Compact(ctx, revC); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	waitFor(t, "the gap's changes handed over", 30*time.Second, func() (bool, string) {
		return c.has(fmt.Sprintf("c@%d=1", revC)) && c.has("b deleted"), fmt.Sprint(c.list())
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	want := []string{fmt.Sprintf("a@%d=1", revA), fmt.Sprintf("b@%d=1", revB), fmt.Sprintf("c@%d=1", revC), "b deleted"}
	got := slices.Clone(c.handed)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("handed over %v, want each of %v once", c.handed, want)
	}
	if !slices.Equal(c.dropped, []string{"b"}) || !c.wanted["a"] || !c.wanted["c"] {
		t.Fatalf("wanted %v, dropped %v; want a and c wanted, b dropped", c.wanted, c.dropped)
	}
}

// A writer waits for the owner's acknowledgement, from any replica; an
// item's records are its own (not those of an item whose name extends
// it); Remove takes a finished record and its acknowledgement, but not a
// newer request.
func TestRecordsAcknowledgeAndWait(t *testing.T) {
	ctx := context.Background()
	prefix := env.EtcdPrefix()
	c := newRecorder()
	owner, err := NewRecords[string, string](RecordsOptions[string]{Client: env.Etcd.Client, Prefix: prefix + "recs/",
		AckPrefix: prefix + "acks/", Claims: c, Owner: c})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	c.onRec = func(r Record[string]) { // the owner acknowledges what it ran
		if r.Deleted {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := owner.Ack(ctx, r.Key, "done "+r.Value); err != nil {
				t.Error(err)
			}
		}()
	}
	runRecords(t, owner)
	if _, err := owner.Put(ctx, "g/x/1", "other"); err != nil { // item "g/x"
		t.Fatal(err)
	}
	rev, err := owner.Put(ctx, "g/1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "g wanted", 30*time.Second, func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.wanted["g"] && c.wanted["g/x"], fmt.Sprint(c.wanted)
	})
	acked := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		acked <- owner.WaitItem(wctx, "g", func(st State[string, string]) bool {
			return len(st.Records) == 1 && st.Acks["g/1"].Value == "done v1"
		})
	}()
	owner.Acquired("g") // hands over g/1, not g/x/1
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	if c.has(fmt.Sprintf("g/x/1@%d=other", rev-1)) {
		t.Fatal("a record of another item was handed over")
	}
	st, err := owner.ReadItem(ctx, "g")
	if err != nil || len(st.Records) != 1 || st.Records[0].Key != "g/1" {
		t.Fatalf("ReadItem(g) = %+v, %v", st, err)
	}
	if err := owner.Remove(ctx, "g/1", rev-1); err != nil { // not that revision: stays
		t.Fatal(err)
	}
	if err := owner.Remove(ctx, "g/1", rev); err != nil {
		t.Fatal(err)
	}
	st, err = owner.ReadItem(ctx, "g")
	if err != nil || len(st.Records) != 0 || len(st.Acks) != 0 {
		t.Fatalf("after Remove: %+v, %v", st, err)
	}
	owner.Released("g")
}
