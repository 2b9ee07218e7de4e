package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// SubscriptionsEnv runs TestDeadReceiverLeavesDescriptors at issue 23's
// scale, 2,000 subscriptions on a process limited to 1,024 descriptors:
//
//	ARGUS_SUBSCRIPTIONS=2000 go test -run TestDeadReceiverLeavesDescriptors -v ./src/internal/e2e
//
// Unset, 600 subscriptions on 512 descriptors: the same excess, sooner.
const SubscriptionsEnv = "ARGUS_SUBSCRIPTIONS"

// deadReceiver accepts connections and never answers, counting those open.
type deadReceiver struct {
	ln         net.Listener
	open, peak atomic.Int64
	accepted   atomic.Int64
	mu         sync.Mutex
	conns      []net.Conn
	wg         sync.WaitGroup
}

func newDeadReceiver(t *testing.T) *deadReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &deadReceiver{ln: ln}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.accepted.Add(1)
			if n := d.open.Add(1); n > d.peak.Load() {
				d.peak.Store(n)
			}
			d.mu.Lock()
			d.conns = append(d.conns, c)
			d.mu.Unlock()
			d.wg.Add(1)
			go func() { // until the client gives up
				defer d.wg.Done()
				_, _ = io.Copy(io.Discard, c)
				d.open.Add(-1)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		d.mu.Lock()
		for _, c := range d.conns {
			_ = c.Close()
		}
		d.mu.Unlock()
		d.wg.Wait()
	})
	return d
}

// Issue 23: 2,000 subscriptions to a receiver that never answers exhausted
// a 1,024-descriptor host (accept4: too many open files; cluster clients
// could not dial). Now deliveries in flight are capped, from the
// descriptors the listeners leave and per receiver host: on a process so
// limited, the orchestrator keeps answering the API and applying to (and
// deleting from) the clusters while every subscription has a delivery
// waiting on the dead receiver.
func TestDeadReceiverLeavesDescriptors(t *testing.T) {
	ownClusters(t) // its deployments' names are those of the tests on the package's clusters
	set := faultClusters(t)
	n, nofile := 600, uint64(512)
	if v := os.Getenv(SubscriptionsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("%s=%q is not a number of subscriptions", SubscriptionsEnv, v)
		}
		nofile = 1024
	}
	dead := newDeadReceiver(t)
	db, prefix := testenv.UniqueName("fd"), "/"+testenv.UniqueName("fd")
	p := startOrchestratorProcess(t, db, prefix, func(c *childConfig) {
		c.NoFile, c.CallbackAllow, c.PerSubject = nofile, []string{"127.0.0.1"}, n
	})
	o := p.orch
	o.t = t
	onboardOn(t, o, set, nil)
	subs := digPath + "/status/subscriptions"
	start := time.Now()
	var wg sync.WaitGroup
	failed := make(chan string, n)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				code, body := o.call("POST", subs, map[string]any{"name": fmt.Sprintf("s%04d", i),
					"callback-url": "http://" + dead.ln.Addr().String() + "/hook", "min-notify-interval": 0})
				if code != 201 {
					failed <- fmt.Sprintf("subscription %d: %d %.200s", i, code, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Fatal(f)
	}
	t.Logf("%d subscriptions to a dead receiver created in %s", n, time.Since(start).Round(time.Millisecond))

	// Every change is now a delivery per subscription to the dead receiver.
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	took := o.waitContext(id, "applied with every subscription's delivery waiting", allResources("Applied"))
	t.Logf("instantiate applied to both clusters in %s", took.Round(time.Millisecond))
	// Deliveries wait on the dead receiver (a few dozen: its share).
	deadline := time.Now().Add(2 * time.Minute)
	for dead.open.Load() < 16 {
		if time.Now().After(deadline) {
			t.Fatalf("no deliveries to the dead receiver: %d connections", dead.accepted.Load())
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	// The API answers meanwhile, reads and writes.
	for i := range 20 {
		begin := time.Now()
		o.must(200, "GET", "/v2/projects", nil)
		o.must(201, "POST", "/v2/projects", map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("during-%d", i)}})
		if d := time.Since(begin); d > 10*time.Second {
			t.Errorf("a read and a write took %s beside the deliveries", d)
		}
	}
	// And rsync still reaches the clusters: terminate deletes everything.
	o.must(202, "POST", digPath+"/terminate", nil)
	took = o.waitContext(id, "deleted with every subscription's delivery waiting", allResources("Deleted"))
	t.Logf("terminate deleted from both clusters in %s; the dead receiver took %d connections, at most %d open at once (descriptors: %d)",
		took.Round(time.Millisecond), dead.accepted.Load(), dead.peak.Load(), nofile)
	if peak := dead.peak.Load(); peak >= int64(nofile)/4 {
		t.Errorf("%d connections to one receiver were open at once, on %d descriptors", peak, nofile)
	}
	p.mu.Lock()
	logs := p.stderr.String()
	p.mu.Unlock()
	if i := strings.Index(logs, "too many open files"); i >= 0 {
		t.Fatalf("the orchestrator ran out of descriptors: %s", logs[max(0, i-500):min(len(logs), i+200)])
	}
}
