package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the timing of one retried operation: how long to wait before
// each next attempt. Its fields are the policy; a value also counts the
// attempts since its last Reset, so copy a configured Backoff to start a
// sequence of its own. The zero value waits nothing.
type Backoff struct {
	// Base is the first wait.
	Base time.Duration
	// Max caps every wait (before jitter); 0 leaves the waits uncapped.
	Max time.Duration
	// Step, when set, makes the waits grow linearly (Base, Base+Step,
	// Base+2·Step, …); otherwise each wait doubles the one before.
	Step time.Duration
	// Jitter spreads each wait d at random over [d·(1−Jitter),
	// d·(1+Jitter)], so retries that failed together do not come back
	// together; 0 keeps the waits exact.
	Jitter float64

	attempt int
}

// Delay is the wait before retry attempt n (from 1), for callers that
// keep the count themselves (a count stored with the work, a timer a
// worker arms rather than sleeps on).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n; i++ {
		if b.Max > 0 && d >= b.Max {
			break
		}
		if b.Step > 0 {
			d += b.Step
		} else if d > 0 && d <= maxWait/2 {
			d *= 2
		} else {
			break
		}
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	if b.Jitter > 0 && d > 0 {
		d = time.Duration(float64(d) * (1 - b.Jitter + 2*b.Jitter*rand.Float64()))
	}
	return d
}

const maxWait = time.Duration(1<<63 - 1)

// Next counts an attempt and returns the wait before the next one.
func (b *Backoff) Next() time.Duration {
	b.attempt++
	return b.Delay(b.attempt)
}

// Wait waits Next(), or less if ctx ends first; it reports whether the
// full wait passed (false: stop retrying).
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Attempts is how many waits were taken since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts the sequence again from Base: the operation succeeded.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits d, or less if ctx ends first; it reports whether the full
// wait passed (false: stop retrying).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
