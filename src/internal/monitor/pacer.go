package monitor

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// writeBurst is how many writes of one bundle may go out back to back: the
// write of a change after a quiet period and the trailing write that
// gathers what followed it within the window. A change in Kubernetes is a
// cascade (a pod's status, then its ReplicaSet's, then its Deployment's,
// tens of milliseconds apart); with a burst of one, only the first step
// could go out at once and the rest would wait a whole write interval.
const writeBurst = 2

// pacer decides when each bundle is synced and written. Events after a
// quiet window sync at once (leading edge); events within the window after
// a sync are gathered into one trailing sync at the window's end, so a
// bundle is synced at most once per window. Writes draw on a token bucket
// that refills one write per interval and holds writeBurst: under churn a
// bundle is written at most once per interval on average, and at most
// writeBurst + T/interval times in any span T. A sync that has to wait for
// the bucket holds back the syncs of later events too, so a bundle under
// churn is not rebuilt every window only to find it may not write.
type pacer struct {
	window   time.Duration
	interval time.Duration
	clock    clock.PassiveClock

	mu   sync.Mutex
	keys map[string]*paced
}

// paced is one bundle's pacing state.
type paced struct {
	synced    time.Time // when its last sync started
	notBefore time.Time // a sync waiting for the bucket: later events wait as long
	writes    *rate.Limiter
}

func newPacer(window, interval time.Duration, c clock.PassiveClock) *pacer {
	return &pacer{window: window, interval: interval, clock: c, keys: map[string]*paced{}}
}

func (p *pacer) get(key string) *paced {
	s, ok := p.keys[key]
	if !ok {
		s = &paced{writes: rate.NewLimiter(rate.Every(p.interval), writeBurst)}
		p.keys[key] = s
	}
	return s
}

// due is how long a sync for an event on key waits: 0 after a quiet
// window, else until the window since the last sync (or the write bucket)
// allows it.
func (p *pacer) due(key string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	s, ok := p.keys[key]
	if !ok {
		return 0
	}
	next := s.synced.Add(p.window)
	if s.notBefore.After(next) {
		next = s.notBefore
	}
	return max(next.Sub(now), 0)
}

// syncing records that a sync of key starts now.
func (p *pacer) syncing(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.get(key).synced = p.clock.Now()
}

// writeWait is how long a changed status of key must wait before it may be
// written: 0 when the bucket holds a write.
func (p *pacer) writeWait(key string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	s := p.get(key)
	tokens := s.writes.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	wait := time.Duration((1 - tokens) * float64(p.interval))
	wait = max(wait, time.Millisecond) // a rounding remainder still waits
	s.notBefore = now.Add(wait)
	return wait
}

// wrote takes a write of key from the bucket once it succeeded.
func (p *pacer) wrote(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.get(key).writes.AllowN(p.clock.Now(), 1)
}

// forget drops a deleted bundle's state.
func (p *pacer) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.keys, key)
}
