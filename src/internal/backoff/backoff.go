package backoff

import (
	"context"
	"time"
)

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
