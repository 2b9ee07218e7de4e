package rungroup

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Nothing runs before Start; stop cancels the run's context, waits for
// every goroutine started under it, and refuses those asked for after.
func TestStopWaitsAndRefuses(t *testing.T) {
	var g Group
	if g.Go(func() {}) || g.Context() != nil {
		t.Fatal("a goroutine started before the run")
	}
	ctx, stop := g.Start(context.Background())
	ended := make(chan struct{})
	if !g.Go(func() {
		<-ctx.Done()
		close(ended)
	}) {
		t.Fatal("Go refused during the run")
	}
	stop()
	select {
	case <-ended:
	default:
		t.Fatal("stop returned before the goroutine ended")
	}
	if g.Go(func() { t.Error("ran after stop") }) {
		t.Fatal("Go accepted after stop")
	}
}
