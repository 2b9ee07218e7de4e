package notify

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// world is a subscription's changing view, as a Source. Its entries come
// in runs, one per key's first letter, kept until one of their entries
// changes, as the status engine's memo keeps a placement's: the workers
// under test skip the runs they know were delivered.
type world struct {
	mu      sync.Mutex
	entries map[string]string // key → digest
	// envelope, when set, is the rest of the payload.
	envelope map[string]any
	// pad adds random bytes to a resource's payload: key → how many.
	pad map[string]int
	// runs are the runs handed out, by first letter.
	runs map[string][]Entry
}

func (w *world) set(key, digest string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if digest == "" {
		delete(w.entries, key)
	} else {
		w.entries[key] = digest
	}
	delete(w.runs, key[:1])
}

// rebuild hands the runs of keys starting with letter out anew, their
// entries unchanged.
func (w *world) rebuild(letter string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.runs, letter)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func (w *world) source(context.Context) (Runs, any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs == nil {
		w.runs = map[string][]Entry{}
	}
	keys := slices.Sorted(maps.Keys(w.entries))
	var out Runs
	for len(keys) > 0 {
		letter := keys[0][:1]
		n := 1
		for n < len(keys) && keys[n][:1] == letter {
			n++
		}
		run, ok := w.runs[letter]
		if !ok {
			for _, k := range keys[:n] {
				d := w.entries[k]
				e := Entry{Key: k, Digest: d, Payload: map[string]any{"name": k, "digest": d}}
				if n := w.pad[k]; n > 0 {
					e.Payload["pad"] = hex.EncodeToString(randomBytes(n / 2))
				}
				run = append(run, e)
			}
			w.runs[letter] = run
		}
		out = append(out, run)
		keys = keys[n:]
	}
	if w.envelope != nil {
		return out, w.envelope, nil
	}
	return out, map[string]any{"instance-id": "42", "ready": true}, nil
}

// receiver records POSTs; answer decides each status.
type receiver struct {
	srv    *httptest.Server
	answer atomic.Int64
	got    chan post
}

type post struct {
	id       string
	sequence int
	changes  Changes
	answered int
	body     []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: make(chan post, 100)}
	r.answer.Store(200)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Changes Changes `json:"resource-changes"`
		}
		raw, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(raw, &body)
		seq, _ := strconv.Atoi(req.Header.Get(HeaderSequence))
		code := int(r.answer.Load())
		p := post{id: req.Header.Get(HeaderDelivery), sequence: seq, changes: body.Changes, answered: code, body: raw}
		w.WriteHeader(code)
		r.got <- p
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) next(t *testing.T) post {
	t.Helper()
	select {
	case p := <-r.got:
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("no POST within 30s")
		return post{}
	}
}

type running struct {
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

// statesFor returns one test's state store; the prefix is chosen once, so a
// restarted worker finds what the first one saved.
func statesFor(t *testing.T) *States { return NewStates(env.Etcd.Client, env.EtcdPrefix()+"notify/") }

func startWorker(t *testing.T, states *States, key string, src Source, url string, minInterval time.Duration) *running {
	t.Helper()
	d, err := NewDeliverer(DelivererOptions{Allow: []string{"127.0.0.1"}}) // the test's receivers
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(WorkerOptions{Key: key, URL: url, Secret: "s", MinInterval: minInterval, Source: src,
		States: states, Deliverer: d, BackoffBase: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t); d.client.CloseIdleConnections() })
	select {
	case <-w.Ready():
	case err := <-r.done:
		t.Fatalf("worker stopped before its baseline: %v", err)
	}
	return r
}

// nextDelivered skips refused attempts and returns the first POST answered 200.
func (r *receiver) nextDelivered(t *testing.T) post {
	t.Helper()
	for {
		if p := r.next(t); p.answered == 200 {
			return p
		}
	}
}

func (r *running) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("worker: %v", err)
	}
}

func TestChangesAreDeliveredInSequence(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{"a": "1", "b": "1"}}
	r := startWorker(t, states, testenv.UniqueName("sub"), w.source, rcv.srv.URL, 0)

	w.set("a", "2")
	r.w.Notify()
	p := rcv.next(t)
	if p.sequence != 1 || len(p.changes.Modified) != 1 || p.changes.Modified[0]["name"] != "a" || len(p.changes.Created)+len(p.changes.Deleted) != 0 {
		t.Fatalf("first POST (the baseline is not sent) = %+v", p)
	}
	w.set("c", "1")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Created) != 1 || p.changes.Created[0]["name"] != "c" {
		t.Fatalf("second POST = %+v", p)
	}
	w.set("b", "")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 3 || len(p.changes.Deleted) != 1 {
		t.Fatalf("third POST = %+v", p)
	}
}

// A worker skips the runs it knows were delivered, and only those: a run
// of a delivered payload is skipped until it changes, a refused payload's
// changes come again with the next, and a run handed out anew with the
// same entries is no change.
func TestSkippedRunsLoseNothing(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{"a1": "1", "a2": "1", "b1": "1", "b2": "1", "c1": "1"}}
	r := startWorker(t, states, testenv.UniqueName("sub"), w.source, rcv.srv.URL, 0)
	names := func(ms []map[string]any) []string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprint(cmp.Or(m["name"], m["key"]))) // a deletion names only the key
		}
		slices.Sort(out)
		return out
	}
	step := func(what string, answer int, change func(), modified, deleted []string) {
		t.Helper()
		rcv.answer.Store(int64(answer))
		change()
		r.w.Notify()
		p := rcv.next(t)
		if got := names(p.changes.Modified); !slices.Equal(got, modified) || !slices.Equal(names(p.changes.Deleted), deleted) || len(p.changes.Created) > 0 {
			t.Fatalf("%s: modified %v deleted %v created %v, want modified %v deleted %v", what, got, names(p.changes.Deleted), names(p.changes.Created), modified, deleted)
		}
	}
	step("a1 changes", 200, func() { w.set("a1", "2") }, []string{"a1"}, nil)
	step("b1 changes, refused", 400, func() { w.set("b1", "2") }, []string{"b1"}, nil)
	step("c1 changes", 200, func() { w.set("c1", "2") }, []string{"b1", "c1"}, nil)
	step("a2 goes, b rebuilt as it was", 200, func() { w.set("a2", ""); w.rebuild("b") }, nil, []string{"a2"})
	step("b2 changes", 200, func() { w.set("b2", "2") }, []string{"b2"}, nil)
}

func TestServerErrorsAreRetriedWithoutLossOrGap(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	rcv.answer.Store(500)
	w := &world{entries: map[string]string{"a": "1"}}
	r := startWorker(t, states, testenv.UniqueName("sub"), w.source, rcv.srv.URL, 0)
	w.set("a", "2")
	r.w.Notify()
	first := rcv.next(t)
	for range 3 { // the same frozen delivery, again and again
		if p := rcv.next(t); p.id != first.id || p.sequence != 1 {
			t.Fatalf("retry changed the delivery: %+v vs %+v", p, first)
		}
	}
	w.set("b", "1") // a change while retrying waits for the next payload
	rcv.answer.Store(200)
	if p := rcv.nextDelivered(t); p.id != first.id || p.sequence != 1 {
		t.Fatalf("the retried delivery changed: %+v", p)
	}
	r.w.Notify()
	p := rcv.next(t)
	if p.sequence != 2 || len(p.changes.Created) != 1 || p.changes.Created[0]["name"] != "b" {
		t.Fatalf("after recovery: %+v", p)
	}
}

func TestClientErrorIsRecordedAndChangesComeAgain(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	rcv.answer.Store(400)
	key := testenv.UniqueName("sub")
	w := &world{entries: map[string]string{"a": "1"}}
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	w.set("a", "2")
	r.w.Notify()
	rcv.next(t)
	deadline := time.Now().Add(30 * time.Second)
	var st State
	for time.Now().Before(deadline) {
		st, _, _ = states.Load(context.Background(), key)
		if st.LastStatus == "400" {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if st.LastStatus != "400" || st.LastError != "callback answered 400" || st.Pending != nil {
		t.Fatalf("state after a 400: %+v", st)
	}
	rcv.answer.Store(200)
	w.set("c", "1")
	r.w.Notify()
	p := rcv.next(t)
	if p.sequence != 2 || len(p.changes.Modified) != 1 || len(p.changes.Created) != 1 {
		t.Fatalf("the refused change must come again with the next: %+v", p)
	}
}

func TestMinIntervalCoalesces(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{"a": "1"}}
	r := startWorker(t, states, testenv.UniqueName("sub"), w.source, rcv.srv.URL, time.Second)
	w.set("a", "2")
	r.w.Notify()
	first := rcv.next(t)
	start := time.Now()
	for i := range 5 { // a burst, inside the interval
		w.set(fmt.Sprint("n", i), "1")
		w.set("a", fmt.Sprint(3+i))
		r.w.Notify()
	}
	w.set("n0", "") // net: n0 came and went
	p := rcv.next(t)
	if took := time.Since(start); took < 800*time.Millisecond {
		t.Fatalf("second POST after %s, inside the 1s interval", took)
	}
	if p.sequence != first.sequence+1 || len(p.changes.Created) != 4 || len(p.changes.Modified) != 1 || len(p.changes.Deleted) != 0 {
		t.Fatalf("coalesced POST = %+v", p)
	}
}

func TestPendingDeliverySurvivesRestart(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	rcv.answer.Store(503)
	key := testenv.UniqueName("sub")
	w := &world{entries: map[string]string{"a": "1"}}
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	w.set("a", "2")
	r.w.Notify()
	first := rcv.next(t)
	r.stop(t) // the orchestrator goes away with the delivery pending
	rcv.answer.Store(200)
	startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	p := rcv.nextDelivered(t)
	if p.id != first.id || p.sequence != 1 || len(p.changes.Modified) != 1 {
		t.Fatalf("after restart: %+v, want the pending delivery %+v", p, first)
	}
}

// A change made after the pending payload froze, while its POSTs fail,
// and signalled to a process that then stops, is not lost: the next
// process resends the payload as it was, then diffs against what that
// payload delivered, so the deletion comes next (e2e TestDIGSubscriptions
// restarts the orchestrator the same way).
func TestChangeAfterThePendingPayloadSurvivesRestart(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	rcv.answer.Store(500)
	key := testenv.UniqueName("sub")
	w := &world{entries: map[string]string{"a": "1", "b": "1"}}
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	w.set("a", "2")
	r.w.Notify()
	first := rcv.next(t) // frozen: a modified
	w.set("b", "")
	r.w.Notify() // waits behind the pending payload
	r.stop(t)
	rcv.answer.Store(200)
	startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	p := rcv.nextDelivered(t)
	if p.id != first.id || p.sequence != 1 || len(p.changes.Modified) != 1 || len(p.changes.Deleted) != 0 {
		t.Fatalf("first after the restart: %+v, want the pending delivery %+v", p, first)
	}
	p = rcv.nextDelivered(t)
	if p.sequence != 2 || len(p.changes.Deleted) != 1 || p.changes.Deleted[0]["key"] != "b" || len(p.changes.Modified)+len(p.changes.Created) != 0 {
		t.Fatalf("next after the restart: %+v, want sequence 2 deleting b", p)
	}
}

// A change signalled to a worker that stopped before freezing it (a PUT
// restarting the worker, a process restart inside min-notify-interval)
// leaves no trace but the world itself: the next worker looks once.
func TestResumedWorkerCatchesUp(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	w := &world{entries: map[string]string{"a": "1"}}
	key := testenv.UniqueName("sub")
	r := startWorker(t, states, key, w.source, rcv.srv.URL, time.Hour)
	w.set("a", "2")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 1 {
		t.Fatalf("first POST = %+v", p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st, _, _ := states.Load(context.Background(), key); st.Pending != nil; st, _, _ = states.Load(context.Background(), key) {
		if time.Now().After(deadline) {
			t.Fatal("the first delivery was never recorded")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	w.set("b", "1")
	r.w.Notify() // never frozen: the hour's interval holds it
	r.stop(t)
	startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Created) != 1 || p.changes.Created[0]["name"] != "b" {
		t.Fatalf("after the restart = %+v", p)
	}
}

// Filters changed (a PUT) while a payload waits for its 2xx: the payload
// is still delivered under its sequence number, and the next change is
// the next number, diffed against what the new filters saw at the PUT.
func TestRebaselineKeepsThePendingPayload(t *testing.T) {
	states := statesFor(t)
	rcv := newReceiver(t)
	rcv.answer.Store(503)
	key := testenv.UniqueName("sub")
	w := &world{entries: map[string]string{"a": "1"}}
	r := startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	w.set("a", "2")
	r.w.Notify()
	first := rcv.next(t)
	r.stop(t) // the PUT restarts the worker with a new baseline to take
	st, _, err := states.Load(context.Background(), key)
	if err != nil || st.Pending == nil {
		t.Fatalf("state before the PUT: %+v %v", st, err)
	}
	st.Rebaseline = true
	if err := states.Save(context.Background(), key, st); err != nil {
		t.Fatal(err)
	}
	w.set("b", "1") // what the new filters see already: part of the baseline
	rcv.answer.Store(200)
	r = startWorker(t, states, key, w.source, rcv.srv.URL, 0)
	if p := rcv.nextDelivered(t); p.id != first.id || p.sequence != 1 || len(p.changes.Modified) != 1 {
		t.Fatalf("after the PUT: %+v, want the pending delivery %+v", p, first)
	}
	w.set("c", "1")
	r.w.Notify()
	if p := rcv.next(t); p.sequence != 2 || len(p.changes.Created) != 1 || p.changes.Created[0]["name"] != "c" || len(p.changes.Modified) != 0 {
		t.Fatalf("the change after the PUT = %+v, want c created as sequence 2", p)
	}
}
