package monitor

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const (
	testWindow   = 50 * time.Millisecond
	testInterval = 500 * time.Millisecond
)

// pacedBundle drives a pacer as the monitor does, on a fake clock: events
// schedule a sync (the delaying queue keeps the earliest time), a sync
// writes when the status changed and the bucket allows, or schedules
// itself again when the bucket says so.
type pacedBundle struct {
	t       *testing.T
	clock   *clocktesting.FakePassiveClock
	p       *pacer
	due     *time.Time // the queued sync, if any
	pending bool       // an event not yet written
	syncs   int
	writes  []time.Time
}

func newPacedBundle(t *testing.T) *pacedBundle {
	c := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &pacedBundle{t: t, clock: c, p: newPacer(testWindow, testInterval, c)}
}

func (b *pacedBundle) schedule(after time.Duration) {
	at := b.clock.Now().Add(after)
	if b.due == nil || at.Before(*b.due) {
		b.due = &at
	}
}

// event is an object change; it runs the sync at once when the pacer says so.
func (b *pacedBundle) event() {
	b.pending = true
	b.schedule(b.p.due("ns/b"))
	b.run()
}

// run performs the queued sync if its time has come.
func (b *pacedBundle) run() {
	if b.due == nil || b.clock.Now().Before(*b.due) {
		return
	}
	b.due = nil
	b.syncs++
	b.p.syncing("ns/b")
	if !b.pending {
		return // the status is what the bundle holds
	}
	if wait := b.p.writeWait("ns/b"); wait > 0 {
		b.schedule(wait)
		return
	}
	b.p.wrote("ns/b")
	b.pending = false
	b.writes = append(b.writes, b.clock.Now())
}

// advance moves the clock in steps of 1 ms, running syncs as they fall due.
func (b *pacedBundle) advance(d time.Duration) {
	for end := b.clock.Now().Add(d); b.clock.Now().Before(end); {
		b.clock.SetTime(b.clock.Now().Add(time.Millisecond))
		b.run()
	}
}

func TestIsolatedChangeIsWrittenAtOnce(t *testing.T) {
	b := newPacedBundle(t)
	for i := range 5 {
		start := b.clock.Now()
		b.event()
		if len(b.writes) != i+1 || !b.writes[i].Equal(start) {
			t.Fatalf("change %d: writes %v, want one at %v, without waiting", i, b.writes, start)
		}
		b.advance(time.Second) // quiet, as isolated changes are
	}
}

func TestCascadeAfterAQuietPeriodIsOneTrailingWrite(t *testing.T) {
	b := newPacedBundle(t)
	start := b.clock.Now()
	b.event() // the changed object: written at once
	for range 4 {
		b.advance(5 * time.Millisecond)
		b.event() // its controllers' statuses: gathered
	}
	if len(b.writes) != 1 {
		t.Fatalf("%d writes inside the window, want only the leading one", len(b.writes))
	}
	b.advance(time.Second)
	if len(b.writes) != 2 || !b.writes[1].Equal(start.Add(testWindow)) {
		t.Fatalf("writes %v, want the leading one and one trailing write at the window's end %v", b.writes, start.Add(testWindow))
	}
}

func TestBurstIsWrittenWithinTheBucket(t *testing.T) {
	b := newPacedBundle(t)
	const burst = 10 * time.Second
	start := b.clock.Now()
	for b.clock.Now().Before(start.Add(burst)) {
		b.event() // one change every millisecond
		b.advance(time.Millisecond)
	}
	last := b.clock.Now()
	b.advance(2 * time.Second)
	if b.pending {
		t.Fatal("the burst's last change was never written")
	}
	span := b.writes[len(b.writes)-1].Sub(start)
	t.Logf("%d changes: %d syncs, %d writes over %s", int(burst/time.Millisecond), b.syncs, len(b.writes), span)
	if limit := writeBurst + int(span/testInterval); len(b.writes) > limit {
		t.Errorf("%d writes over %s, want at most %d (a burst of %d, then one per %s)", len(b.writes), span, limit, writeBurst, testInterval)
	}
	if len(b.writes) < int(burst/testInterval) {
		t.Errorf("%d writes over a %s burst: the bundle fell behind", len(b.writes), burst)
	}
	// Syncs: one per window at most while the bucket allows, and no
	// rebuilds the bucket would not let write.
	if limit := int(span/testWindow) + 1; b.syncs > limit {
		t.Errorf("%d syncs over %s, want at most one per window (%d)", b.syncs, span, limit)
	}
	if b.syncs > 3*len(b.writes) {
		t.Errorf("%d syncs for %d writes: syncs kept running while the bucket was empty", b.syncs, len(b.writes))
	}
	for i := 1; i < len(b.writes); i++ {
		if gap := b.writes[i].Sub(b.writes[i-1]); gap < testWindow {
			t.Errorf("writes %d and %d %s apart, closer than the window", i-1, i, gap)
		}
	}
	if b.writes[len(b.writes)-1].Sub(last) > testInterval {
		t.Errorf("the last write came %s after the burst ended, want within %s", b.writes[len(b.writes)-1].Sub(last), testInterval)
	}
}

func TestForgottenBundleStartsQuiet(t *testing.T) {
	b := newPacedBundle(t)
	b.event()
	b.advance(time.Millisecond)
	b.event()
	b.p.forget("ns/b")
	if d := b.p.due("ns/b"); d != 0 {
		t.Fatalf("a recreated bundle waits %s, want a sync at once", d)
	}
}
