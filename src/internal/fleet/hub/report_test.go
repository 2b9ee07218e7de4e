package hub

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// FuzzReport: whatever an agent sends as a report, checking it never
// panics, and what it accepts stays within the bounds.
func FuzzReport(f *testing.F) {
	seeds := []*pb.StatusReport{
		{Seq: 1, Monitor: &pb.Monitor{State: appcontext.MonitorRunning}},
		{Seq: 2, Placements: []*pb.PlacementReport{{ContextId: "1", App: "a", Generation: 3, Settled: true,
			Resources: []*pb.ResourceReport{{Key: "ConfigMap/default/a", Status: "Applied", Manifest: strings.Repeat("ab", 32)}}}}},
		{Seq: 3, Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Bogus"}}}}},
		{Seq: 4, Bundles: []*pb.BundleReport{{StatusId: "1", App: "a", Status: []byte(`{"ready":true}`)}}},
	}
	for _, s := range seeds {
		data, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r pb.StatusReport
		if proto.Unmarshal(data, &r) != nil {
			return // gRPC refuses what does not decode
		}
		if checkReport(&r) != nil {
			return
		}
		for _, pr := range r.GetPlacements() {
			for _, rr := range pr.GetResources() {
				st, err := resourceStatus(rr)
				if err != nil || !rsyncStatuses[st.Status] || len(st.Error) > maxReason || len(st.Warnings) > maxWarnings {
					t.Fatalf("accepted %+v (%v)", rr, err)
				}
			}
		}
	})
}

func TestCheckReport(t *testing.T) {
	long := strings.Repeat("x", maxReason+1)
	for name, c := range map[string]struct {
		r  *pb.StatusReport
		ok bool
	}{
		"heartbeat":      {&pb.StatusReport{Monitor: &pb.Monitor{State: "Running"}}, true},
		"status":         {&pb.StatusReport{Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Failed", Error: "422"}}}}}, true},
		"unknown status": {&pb.StatusReport{Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Done"}}}}}, false},
		"long reason":    {&pb.StatusReport{Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Failed", Error: long}}}}}, false},
		"bad manifest":   {&pb.StatusReport{Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Applied", Manifest: "zz"}}}}}, false},
		"many warnings": {&pb.StatusReport{Placements: []*pb.PlacementReport{{Resources: []*pb.ResourceReport{{Status: "Applied",
			Warnings: make([]string, maxWarnings+1)}}}}}, false},
		"long monitor reason": {&pb.StatusReport{Monitor: &pb.Monitor{State: "NotInstalled", Reason: long}}, false},
	} {
		if err := checkReport(c.r); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", name, err, c.ok)
		}
	}
}

// A report sent right behind the Hello, before the Welcome is read (an
// agent resending what the last stream did not get acknowledged), is
// checked against the cluster's work as it stands, not against a session
// that has not read it yet: its bundle is stored before the report is
// acknowledged.
func TestReportBehindHelloIsStored(t *testing.T) {
	f := newFixture(t)
	c := f.newContext(t, "a")
	f.publish(t, c, "a")
	st, _ := f.rogue(t, f.joined(t, edge).c.Credential).open()
	hello := &pb.Hello{ClusterProvider: edge.Provider, Cluster: edge.Name}
	r := &pb.StatusReport{Seq: 1, Bundles: []*pb.BundleReport{{StatusId: c.Meta.StatusID, App: "a", Namespace: "default", Name: "a",
		ResourceVersion: "7", Status: []byte(`{"ready":false,"resourceCount":1}`)}}}
	for _, m := range []*pb.AgentMessage{{Body: &pb.AgentMessage_Hello{Hello: hello}}, {Body: &pb.AgentMessage_Report{Report: r}}} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetStatusAck().GetSeq() == 1 {
			break
		}
	}
	snap, ok, err := f.store.Bundle(t.Context(), c.Meta.ID, "a", edge)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || snap.ResourceVersion != "7" {
		t.Fatalf("the report was acknowledged, but its bundle is not stored (stored: %v, %+v)", ok, snap)
	}
}

// A heartbeat (an unnumbered report) is taken in — the monitor's state is
// stored — but not acknowledged, unless waiting for the next heartbeat
// would leave the stream quiet towards the agent for maxQuietToAgent; a
// numbered report always is.
func TestHeartbeatIsNotAcknowledged(t *testing.T) {
	var skew atomic.Int64
	f := newFixture(t, func(o *Options) { o.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
	st, _, err := f.rogue(t, f.joined(t, edge).c.Credential).hello(edge)
	if err != nil {
		t.Fatal(err)
	}
	send := func(seq int64, state string) {
		r := &pb.StatusReport{Seq: seq, Monitor: &pb.Monitor{State: state}}
		if err := st.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
	}
	acks := make(chan int64, 4)
	go func() { // until the stream ends with the test
		defer close(acks)
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			if a := m.GetStatusAck(); a != nil {
				acks <- a.GetSeq()
			}
		}
	}()
	acked := func() int64 {
		select {
		case seq, ok := <-acks:
			if !ok {
				t.Fatal("the stream ended")
			}
			return seq
		case <-time.After(30 * time.Second):
			t.Fatal("no acknowledgement within 30 s")
		}
		return 0
	}
	monitor := func() string {
		states, err := f.store.ClusterStates(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return states[edge].Monitor
	}
	send(0, appcontext.MonitorNotInstalled)
	waitFor(t, "the heartbeat's monitor state stored", func() bool { return monitor() == appcontext.MonitorNotInstalled })
	send(1, appcontext.MonitorRunning)
	if seq := acked(); seq != 1 {
		t.Fatalf("acknowledged report %d, want only the numbered one (1)", seq)
	}
	if got := monitor(); got != appcontext.MonitorRunning {
		t.Fatalf("monitor %q after the numbered report, want Running", got)
	}
	// Nothing sent to the agent for long enough that the next heartbeat
	// would come too late: this one is acknowledged, so the stream is not
	// silent one way.
	skew.Store(int64(maxQuietToAgent))
	send(0, appcontext.MonitorRunning)
	if seq := acked(); seq != 0 {
		t.Fatalf("acknowledged report %d, want the heartbeat (0)", seq)
	}
}
