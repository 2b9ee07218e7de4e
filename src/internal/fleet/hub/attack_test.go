package hub

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// A rogue agent: a raw fleet client holding a real credential, which
// speaks the protocol as it likes. Its flow-control windows are fixed
// and small, so what it does not read stays on the hub's side.
type rogue struct {
	t    *testing.T
	cli  pb.FleetClient
	cred string
}

func (f *fixture) rogue(t *testing.T, cred string) *rogue {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rogue{t: t, cli: pb.NewFleetClient(conn), cred: cred}
}

// open opens a stream that lasts until the test ends or cancel.
func (r *rogue) open() (pb.Fleet_ConnectClient, context.CancelFunc) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	st, err := r.cli.Connect(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.cred))
	if err != nil {
		r.t.Fatal(err)
	}
	return st, cancel
}

// hello opens a stream for ref and returns it with the hub's first
// answer: its Welcome, or the stream's error.
func (r *rogue) hello(ref appcontext.ClusterRef) (pb.Fleet_ConnectClient, context.CancelFunc, error) {
	r.t.Helper()
	st, cancel := r.open()
	if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{ClusterProvider: ref.Provider, Cluster: ref.Name}}}); err != nil {
		_, err = st.Recv() // the stream's own error
		return st, cancel, err
	}
	m, err := st.Recv()
	if err == nil && m.GetWelcome() == nil {
		r.t.Fatalf("first message %v, want a Welcome", m)
	}
	return st, cancel, err
}

// One cluster's credential cannot take every stream slot of a replica by
// opening streams that never say Hello: beyond MaxStreamsPerCluster they
// are refused at once, and another cluster's agent still gets in.
func TestOneClusterCannotTakeEveryStream(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxAgents = 6 })
	other := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	bad := f.rogue(t, f.joined(t, edge).c.Credential)
	good := f.rogue(t, f.joined(t, other).c.Credential)
	codesOf := make(chan codes.Code, 6)
	for range 6 {
		st, _ := bad.open()
		go func() {
			_, err := st.Recv()
			codesOf <- status.Code(err)
		}()
	}
	for range 6 - DefaultMaxStreamsPerCluster {
		select {
		case c := <-codesOf:
			if c != codes.ResourceExhausted {
				t.Fatalf("a stream past the cluster's share: %s, want ResourceExhausted", c)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no stream past the cluster's share was refused within 30s")
		}
	}
	if _, _, err := good.hello(other); err != nil {
		t.Fatalf("another cluster's agent: %v, want a Welcome", err)
	}
}

// An agent that reconnects in a loop gets ConnectBurst streams, then is
// told to back off: each stream costs etcd writes and a read of the
// cluster's work.
func TestReconnectStormIsRefused(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.ConnectBurst, o.ConnectInterval, o.MaxStreamsPerCluster = 3, time.Hour, 100 })
	bad := f.rogue(t, f.joined(t, edge).c.Credential)
	welcomed := 0
	for range 10 {
		_, cancel, err := bad.hello(edge)
		switch status.Code(err) {
		case codes.OK:
			welcomed++
		case codes.ResourceExhausted:
		default:
			t.Fatalf("a reconnect: %v", err)
		}
		cancel()
	}
	if welcomed != 3 {
		t.Fatalf("%d of 10 quick reconnects welcomed, want the burst of 3", welcomed)
	}
}

// bigConfigMap is a ConfigMap whose manifest is about n bytes.
func bigConfigMap(name string, n int) appcontext.Resource {
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name},
		"data": map[string]any{"blob": strings.Repeat("x", n)}})
	return appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Manifest: data}
}

// workOf reads the stream's first work batch and returns its first item.
func workOf(t *testing.T, st pb.Fleet_ConnectClient) *pb.WorkItem {
	t.Helper()
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if w := m.GetWork(); w != nil && len(w.GetItems()) > 0 {
			return w.GetItems()[0]
		}
	}
}

// A manifest named many times in one request is read and sent once, and
// an agent that asks without reading holds at most MaxQueuedBytes of the
// hub's memory: the hub stops reading it instead.
func TestBlobRequestsAreBounded(t *testing.T) {
	const limit = 256 << 10
	f := newFixture(t, func(o *Options) { o.MaxQueuedBytes = limit })
	bad := f.rogue(t, f.joined(t, edge).c.Credential)
	c := f.newContext(t, "a")
	p := c.Placement("a", edge)
	p.Resources = []appcontext.Resource{bigConfigMap("a", 64<<10)}
	if err := f.store.Replace(t.Context(), c.Meta.ID, []*appcontext.Placement{p}, nil, c.Status); err != nil {
		t.Fatal(err)
	}
	c, err := f.store.Get(t.Context(), c.Meta.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, c, "a")
	st, _, err := bad.hello(edge)
	if err != nil {
		t.Fatal(err)
	}
	item := workOf(t, st)
	sum := item.GetResources()[0].GetSha256()
	same := make([]string, 100)
	for i := range same {
		same[i] = sum
	}
	send := func(m *pb.AgentMessage) {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: &pb.BlobRequest{ContextId: item.GetContextId(), Sha256: same}}})
	send(&pb.AgentMessage{Body: &pb.AgentMessage_Report{Report: &pb.StatusReport{Seq: 1}}})
	blobs := 0
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		blobs += len(m.GetBlobs().GetBlobs())
		if m.GetStatusAck() != nil {
			break
		}
	}
	if blobs != 1 {
		t.Fatalf("a manifest asked for 100 times in one request was sent %d times, want once", blobs)
	}

	// Now ask 100 times, one request each, and read nothing.
	for range 100 {
		send(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: &pb.BlobRequest{ContextId: item.GetContextId(), Sha256: []string{sum}}}})
	}
	var s *session
	waitFor(t, "the session", func() bool { f.hub.mu.Lock(); s = f.hub.sessions[edge]; f.hub.mu.Unlock(); return s != nil })
	queued := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.queued }
	waitFor(t, "the queue full", func() bool { return queued() >= limit })
	peak := 0
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(10 * time.Millisecond) {
		peak = max(peak, queued())
	}
	// One request is read while the queue is under the limit, and adds
	// one manifest.
	if peak > limit+(80<<10) {
		t.Fatalf("%d bytes queued for an agent that does not read, want at most %d", peak, limit+(80<<10))
	}
}

// An agent's reports are written at most at ReportBytesPerSecond after a
// burst: a rogue agent cannot fill etcd with status.
func TestReportWritesAreRateLimited(t *testing.T) {
	const rate, burst, bundle = 64 << 10, 128 << 10, 32 << 10
	f := newFixture(t, func(o *Options) { o.ReportBytesPerSecond, o.ReportBurst = rate, burst })
	bad := f.rogue(t, f.joined(t, edge).c.Credential)
	c := f.newContext(t, "a")
	f.publish(t, c, "a")
	st, _, err := bad.hello(edge)
	if err != nil {
		t.Fatal(err)
	}
	item := workOf(t, st)
	start := time.Now()
	acked := 0
	for seq := int64(1); time.Since(start) < time.Second; seq++ {
		body, _ := json.Marshal(map[string]any{"ready": seq%2 == 0, "resourceCount": 1, "filler": strings.Repeat("y", bundle)})
		r := &pb.StatusReport{Seq: seq, Bundles: []*pb.BundleReport{{StatusId: item.GetStatusId(), App: "a", Namespace: "default",
			Name: "a", ResourceVersion: time.Now().String(), Status: body}}}
		if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.GetStatusAck().GetSeq() == seq {
				break
			}
		}
		acked++
	}
	elapsed := time.Since(start).Seconds()
	if most := (burst + int(rate*elapsed)) / bundle; acked > most+1 {
		t.Fatalf("%d reports of %d bytes stored in %.1fs, want at most %d (%d bytes/s after %d)", acked, bundle, elapsed, most+1, rate, burst)
	}
}

// A report the hub makes wait for its cluster's write budget does not
// make the agent Silent meanwhile: the agent spoke, the hub holds it back.
func TestThrottledAgentIsNotSilent(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.ReportBytesPerSecond, o.ReportBurst, o.SilentAfter = reportOverhead, reportOverhead, 300*time.Millisecond
	})
	bad := f.rogue(t, f.joined(t, edge).c.Credential)
	st, _, err := bad.hello(edge)
	if err != nil {
		t.Fatal(err)
	}
	send := func(seq int64) {
		r := &pb.StatusReport{Seq: seq, Monitor: &pb.Monitor{State: appcontext.MonitorRunning}}
		if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
	}
	acked := make(chan int64, 4)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				close(acked)
				return
			}
			if a := m.GetStatusAck(); a != nil {
				acked <- a.GetSeq()
			}
		}
	}()
	monitor := func() string {
		states, err := f.store.ClusterStates(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return states[edge].Monitor
	}
	send(1) // the burst
	if seq := <-acked; seq != 1 {
		t.Fatalf("ack %d, want 1", seq)
	}
	waitFor(t, "Running", func() bool { return monitor() == appcontext.MonitorRunning })
	send(2) // waits a second for the budget, three times SilentAfter
	for {
		select {
		case seq := <-acked:
			if seq != 2 {
				t.Fatalf("ack %d, want 2", seq)
			}
			return
		case <-time.After(20 * time.Millisecond):
			if m := monitor(); m != appcontext.MonitorRunning {
				t.Fatalf("while its report waited for the write budget: monitor %s, want Running", m)
			}
		}
	}
}
