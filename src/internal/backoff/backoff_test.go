package backoff

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a full wait reported as cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) || time.Since(start) > 10*time.Second {
		t.Fatal("an ended context did not cut the wait short")
	}
}

func TestDelay(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	for name, tc := range map[string]struct {
		b    Backoff
		want []time.Duration // attempts 1, 2, …
	}{
		"zero waits nothing":   {Backoff{}, []time.Duration{0, 0, 0}},
		"doubling to the cap":  {Backoff{Base: 500 * ms, Max: 30 * s}, []time.Duration{500 * ms, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}},
		"linear to the cap":    {Backoff{Base: s, Step: s, Max: 10 * s}, []time.Duration{s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s, 8 * s, 9 * s, 10 * s, 10 * s}},
		"linear without a cap": {Backoff{Base: 500 * ms, Step: 500 * ms}, []time.Duration{500 * ms, s, 1500 * ms}},
		"constant":             {Backoff{Base: s, Max: s}, []time.Duration{s, s, s}},
	} {
		for i, want := range tc.want {
			if got := tc.b.Delay(i + 1); got != want {
				t.Errorf("%s: attempt %d waits %s, want %s", name, i+1, got, want)
			}
		}
	}
	// Doubling never overflows, however many attempts.
	if d := (Backoff{Base: time.Hour}).Delay(1000); d <= 0 {
		t.Fatalf("attempt 1000 waits %s", d)
	}
}

func TestJitterStaysInItsRange(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	for n := 1; n < 10; n++ {
		d := min(100*time.Millisecond<<(n-1), time.Second)
		lo, hi := time.Duration(float64(d)*0.8), time.Duration(float64(d)*1.2)
		for range 50 {
			if got := b.Delay(n); got < lo || got > hi {
				t.Fatalf("attempt %d waits %s, out of [%s, %s]", n, got, lo, hi)
			}
		}
	}
}

func TestNextCountsAndResets(t *testing.T) {
	b := Backoff{Base: time.Millisecond}
	if b.Next() != time.Millisecond || b.Next() != 2*time.Millisecond || b.Attempts() != 2 {
		t.Fatal("Next does not double from Base")
	}
	b.Reset()
	if b.Next() != time.Millisecond {
		t.Fatal("Reset does not start from Base again")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) {
		t.Fatal("Wait with an ended context reported a full wait")
	}
}
