package history

import (
	"context"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/status"
)

func since(r status.ResourceState, t time.Time) status.ResourceState {
	r.Since = t
	return r
}

// An instantiate's resources pass through queued, applied-not-reported and
// present-not-ready states within a second or two: each is recorded once,
// when it is Ready or when its settle window ends; a change long after the
// apply, and anything rsync failed, is recorded at once.
func TestSettleFoldsTheApplyTimeBlips(t *testing.T) {
	applied := t0
	pod := key("sink", "edge1", "Pod", "sink-7d9c-a")
	steps := []struct {
		at    time.Duration
		snap  status.Snapshot
		want  string
		again time.Duration // when settle asks to look again; 0 for never
	}{
		{0, snapshot("Instantiating", false, since(res(cm, "Pending", "NotPresent", "NotPresent", "not applied"), applied),
			since(res(dep, "Pending", "NotPresent", "NotPresent", "not applied"), applied)),
			"status:>Instantiating/false", SettleWindow},
		{200 * time.Millisecond, snapshot("Instantiated", false, since(res(cm, "Applied", "NotPresent", "NotPresent", "not found"), applied.Add(100*time.Millisecond)),
			since(res(dep, "Applied", "NotPresent", "NotPresent", "not found"), applied.Add(100*time.Millisecond))),
			"status:Instantiating/false>Instantiated/false", 100*time.Millisecond + SettleWindow},
		{600 * time.Millisecond, snapshot("Instantiated", false, since(res(cm, "Applied", "Present", "Ready", ""), applied.Add(100*time.Millisecond)),
			since(res(dep, "Applied", "Present", "Pending", "0 of 1 replicas ready"), applied.Add(100*time.Millisecond)),
			res(pod, "", "Present", "Pending", "containers not ready")),
			"resource:ConfigMap/sink-configmap ->Applied,Present,Ready", 100*time.Millisecond + SettleWindow},
		{1500 * time.Millisecond, snapshot("Instantiated", true, since(res(cm, "Applied", "Present", "Ready", ""), applied.Add(100*time.Millisecond)),
			since(res(dep, "Applied", "Present", "Ready", ""), applied.Add(100*time.Millisecond)),
			res(pod, "", "Present", "Ready", "")),
			"status:Instantiated/false>Instantiated/true | resource:Deployment/sink ->Applied,Present,Ready | resource:Pod/sink-7d9c-a ->,Present,Ready", 0},
		// Long after the apply: a deleted ConfigMap is recorded at once.
		{time.Minute, snapshot("Instantiated", false, since(res(cm, "Applied", "NotPresent", "NotPresent", "not found"), applied.Add(100*time.Millisecond)),
			since(res(dep, "Applied", "Present", "Ready", ""), applied.Add(100*time.Millisecond)),
			res(pod, "", "Present", "Ready", "")),
			"status:Instantiated/true>Instantiated/false | resource:ConfigMap/sink-configmap Applied,Present,Ready>Applied,NotPresent,NotPresent", 0},
	}
	var cur cursor
	var seen sightings
	for i, s := range steps {
		now := t0.Add(s.at)
		settled, held, again := settle(cur, s.snap, now, seen)
		got := diff(cur, settled, now)
		if d := describe(got); d != s.want {
			t.Fatalf("step %d: got  %s\nwant %s", i, d, s.want)
		}
		if want := t0.Add(s.again); (s.again == 0) != again.IsZero() || (s.again != 0 && !again.Equal(want)) {
			t.Fatalf("step %d: look again at %v, want %v", i, again, want)
		}
		for _, e := range got {
			cur.apply(&e)
		}
		seen = held
	}

	// A resource still not Ready when its window ends is recorded then, in
	// the state it is in; a failed apply is never held.
	cur, seen = cursor{}, nil
	stuck := snapshot("Instantiated", false, since(res(dep, "Applied", "Present", "Pending", "0 of 1 replicas ready"), t0),
		since(res(cm, "Failed", "NotPresent", "Failed", "apply failed: invalid"), t0))
	settled, held, _ := settle(cur, stuck, t0.Add(time.Second), seen)
	if d := describe(diff(cur, settled, t0.Add(time.Second))); d != "status:>Instantiated/false | resource:ConfigMap/sink-configmap ->Failed,NotPresent,Failed" {
		t.Fatalf("within the window: %s", d)
	}
	settled, _, again := settle(cur, stuck, t0.Add(SettleWindow), held)
	if d := describe(diff(cur, settled, t0.Add(SettleWindow))); d != "status:>Instantiated/false | resource:ConfigMap/sink-configmap ->Failed,NotPresent,Failed | resource:Deployment/sink ->Applied,Present,Pending" || !again.IsZero() {
		t.Fatalf("at the window's end: %s (again %v)", d, again)
	}
}

// The recorder looks at a group again when the window of what it held
// closes, so a resource that never settles is recorded without another
// change coming.
func TestRecorderRecordsWhatNeverSettles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := NewStore(StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	src := &source{}
	const g = "dig:p/ca/v1/settle"
	src.set(g, snapshot("Instantiated", false, since(res(dep, "Applied", "Present", "Pending", "0 of 1 replicas ready"), time.Now().UTC())))
	runRecorder(t, RecorderOptions{Store: store, Source: src, Groups: func(context.Context) ([]string, error) { return []string{g}, nil }})
	for {
		l, err := store.List(ctx, g, Filter{Query: status.Query{Resources: []string{"sink"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 1 {
			if l[0].To.ReadyStatus != "Pending" {
				t.Fatalf("recorded %s", describe(l))
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the unsettled Deployment was never recorded")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
