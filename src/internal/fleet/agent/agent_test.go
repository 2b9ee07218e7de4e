package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sort"
	"testing"

	"go.uber.org/goleak"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LeakOptions()...) }

func running() (string, string) { return appcontext.MonitorRunning, "" }

var web = WorkKey{Context: "1", App: "web"}

// Unacknowledged status is sent again after a reconnect, acknowledged
// status never; a heartbeat carries only the monitor and is not
// numbered (the hub does not acknowledge it).
func TestUplinkResendsOnlyWhatWasNotAcknowledged(t *testing.T) {
	u := newUplink()
	u.Statuses(web, 7, map[string]appcontext.ResourceStatus{"ConfigMap/default/a": {Status: appcontext.RsyncApplied}})
	u.Bundle(Bundle{Namespace: "default", Name: "web-1", StatusID: "1", App: "web", Status: []byte(`{}`)})
	first := u.next(false, running)
	if first == nil || len(first.Placements) != 1 || len(first.Bundles) != 1 || first.Monitor.GetState() != appcontext.MonitorRunning {
		t.Fatalf("first report %v", first)
	}
	if r := u.next(false, running); r != nil {
		t.Fatalf("nothing changed, yet %v", r)
	}
	u.Statuses(web, 7, map[string]appcontext.ResourceStatus{"ConfigMap/default/b": {Status: appcontext.RsyncFailed, Error: "no"}})
	second := u.next(false, running)
	u.ack(second.GetSeq()) // only the second is acknowledged
	u.disconnected()
	again := u.next(false, running)
	if again == nil || len(again.Bundles) != 1 || len(again.Placements) != 1 || len(again.Placements[0].Resources) != 1 ||
		again.Placements[0].Resources[0].GetKey() != "ConfigMap/default/a" {
		t.Fatalf("after the reconnect: %v, want the first report's content only", again)
	}
	u.ack(again.GetSeq())
	u.disconnected()
	if r := u.next(false, running); r != nil {
		t.Fatalf("everything was acknowledged, yet %v", r)
	}
	hb := u.next(true, running)
	if hb == nil || len(hb.Placements) != 0 || len(hb.Bundles) != 0 || hb.Monitor == nil || hb.GetSeq() != 0 {
		t.Fatalf("heartbeat %v, want the monitor alone, unnumbered", hb)
	}
	if len(u.inflight) != 0 {
		t.Fatalf("a heartbeat waits for an acknowledgement: %v", u.inflight)
	}
	u.resendAll()
	if r := u.next(false, running); r == nil || len(r.Placements[0].Resources) != 2 || len(r.Bundles) != 1 {
		t.Fatalf("resend all: %v", r)
	}
}

// Progress goes with the placement's last statuses, and a newer
// generation resets it.
func TestUplinkProgress(t *testing.T) {
	u := newUplink()
	u.Statuses(web, 3, map[string]appcontext.ResourceStatus{"k": {Status: appcontext.RsyncApplied}})
	u.Progress(web, 3, true, true)
	r := u.next(false, running)
	if p := r.Placements[0]; p.GetGeneration() != 3 || !p.GetSettled() || !p.GetQuiet() {
		t.Fatalf("progress %v", p)
	}
	u.Progress(web, 2, false, false) // an older generation: ignored
	u.Statuses(web, 4, map[string]appcontext.ResourceStatus{"k": {Status: appcontext.RsyncPending}})
	r = u.next(false, running)
	if p := r.Placements[0]; p.GetGeneration() != 4 || p.GetSettled() {
		t.Fatalf("new generation: %v", p)
	}
}

func blob(s string) (string, []byte) {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:]), []byte(s)
}

func item(id, app string, gen int64, sums ...string) *pb.WorkItem {
	it := &pb.WorkItem{ContextId: id, App: app, Generation: gen, StatusId: id}
	for i, s := range sums {
		it.Resources = append(it.Resources, &pb.Resource{Version: "v1", Kind: "ConfigMap", Name: app + string(rune('a'+i)), Sha256: s})
	}
	return it
}

// Items wait for their manifests; a batch's revision is taken in once
// nothing waits; a complete batch forgets what it does not list; a
// manifest that does not match its hash is not taken.
func TestWorkStateTakesInBatches(t *testing.T) {
	s := newWorkState()
	sa, da := blob(`{"a":1}`)
	sb, db := blob(`{"b":2}`)
	o := s.batch(&pb.WorkBatch{Revision: 10, Complete: true, Keys: []*pb.WorkKey{{ContextId: "1", App: "web"}},
		Items: []*pb.WorkItem{item("1", "web", 9, sa, sb)}})
	if len(o.apply) != 0 || o.ack != 0 || len(o.ask) != 1 || !slices.Equal(sorted(o.ask[0].Sha256), sorted([]string{sa, sb})) {
		t.Fatalf("first batch: %+v", o)
	}
	o = s.blobsArrived(&pb.Blobs{ContextId: "1", Blobs: []*pb.Blob{{Sha256: sa, Data: da}, {Sha256: sb, Data: []byte("tampered")}}})
	if len(o.apply) != 0 || o.ack != 0 {
		t.Fatalf("a manifest not matching its hash was taken: %+v", o)
	}
	o = s.blobsArrived(&pb.Blobs{ContextId: "1", Blobs: []*pb.Blob{{Sha256: sb, Data: db}}})
	if len(o.apply) != 1 || o.ack != 10 || s.Revision() != 10 || string(o.apply[0].Resources[1].Manifest) != string(db) {
		t.Fatalf("manifests arrived: %+v", o)
	}
	// The same item again (a catch-up after a reconnect): nothing to do.
	if o := s.batch(&pb.WorkBatch{Revision: 11, Items: []*pb.WorkItem{item("1", "web", 9, sa, sb)}}); len(o.apply) != 0 || o.ack != 11 {
		t.Fatalf("known item again: %+v", o)
	}
	// A new generation reusing a manifest: applied at once.
	if o := s.batch(&pb.WorkBatch{Revision: 12, Items: []*pb.WorkItem{item("1", "web", 12, sa)}}); len(o.apply) != 1 || len(o.ask) != 0 {
		t.Fatalf("new generation with a known manifest: %+v", o)
	}
	// A complete batch without it: forgotten, and its manifests dropped.
	o = s.batch(&pb.WorkBatch{Revision: 13, Complete: true})
	if !slices.Equal(o.forget, []WorkKey{web}) || len(s.blobs) != 0 {
		t.Fatalf("complete batch: %+v, blobs %v", o, slices.Collect(maps.Keys(s.blobs)))
	}
}

func sorted(l []string) []string {
	l = slices.Clone(l)
	sort.Strings(l)
	return l
}

// URLs: https anywhere, plain http only to loopback, decided without
// resolving anything.
func TestEndpoints(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://argus.example.com": true, "https://10.1.2.3:9015": true, "http://127.0.0.1:9015": true, "http://[::1]:9015": true,
		"http://localhost:9015": true, "http://argus.example.com": false, "http://10.0.0.1:9015": false, "ftp://x": false,
		"https://argus.example.com/api": false, "https://user@argus.example.com": false, "argus:9015": false,
	} {
		_, err := parseEndpoint(raw, nil)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%v", raw, err, ok)
		}
	}
	e, _ := parseEndpoint("https://argus.example.com", nil)
	if e.target != "dns:///argus.example.com:443" || e.tls == nil || e.tls.ServerName != "argus.example.com" {
		t.Errorf("endpoint %+v", e)
	}
}

// Agents given several URLs start at one picked at random, and after a
// failure go to another picked at random: a fleet's agents spread over
// the replicas, and those of a replica that went away over the others.
func TestEndpointsSpread(t *testing.T) {
	urls := []string{"https://r1.example.com:443", "https://r2.example.com:443", "https://r3.example.com:443"}
	firsts, after := map[int]int{}, map[int]int{}
	for range 300 {
		a, err := New(Options{Orchestrators: urls, Cluster: nopCluster{}, Credentials: &memCredentials{}})
		if err != nil {
			t.Fatal(err)
		}
		firsts[a.first]++
		next := a.next(0)
		if next == 0 {
			t.Fatal("after endpoint 0 failed, endpoint 0 again")
		}
		after[next]++
	}
	for i := range urls {
		if firsts[i] < 50 { // 100 expected; under 50 is a chance below 1e-9
			t.Errorf("first endpoints %v: %d too rarely first", firsts, i)
		}
	}
	if after[1] < 100 || after[2] < 100 { // 150 each expected
		t.Errorf("endpoints after 0 failed: %v, want 1 and 2 alike", after)
	}
	one, err := New(Options{Orchestrators: urls[:1], Cluster: nopCluster{}, Credentials: &memCredentials{}})
	if err != nil {
		t.Fatal(err)
	}
	if one.first != 0 || one.next(0) != 0 {
		t.Errorf("one URL: first %d, next %d", one.first, one.next(0))
	}
}
