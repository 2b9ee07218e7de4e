package orchestrator

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
)

// Parts start in the order added and stop in reverse; a part's stop comes
// before the wait for its run (a server's drain ends its serve), runs end
// when the app's context does, and a part added but never started is
// still stopped.
func TestLifecycleOrder(t *testing.T) {
	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	life := newLifecycle(logrus.NewEntry(logging.Discard()))
	started := make(chan string, 3)
	background := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			started <- name
			<-ctx.Done()
			note(name + " returned")
			return ctx.Err()
		}
	}
	life.onStop("stores", func() error { note("stores closed"); return errors.New("etcd would not close") })
	life.add("cache", background("cache"), nil)
	life.add("notifier", background("notifier"), func() error { note("notifier stopped"); return nil })
	served := make(chan struct{})
	api := life.add("API", func(context.Context) error { <-served; note("API returned"); return nil },
		func() error { note("API drained"); close(served); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	life.start(ctx)
	got := map[string]bool{<-started: true, <-started: true}
	if !got["cache"] || !got["notifier"] {
		t.Fatalf("started %v", got)
	}
	life.onStop("late", func() error { note("late stopped"); return nil }) // added, never started
	select {
	case <-api.exited:
		t.Fatal("the API's run ended before its stop")
	default:
	}
	cancel()
	err := life.stop()
	if err == nil || !strings.Contains(err.Error(), "stores: etcd would not close") {
		t.Fatalf("stop: %v", err)
	}
	// The two background runs end as soon as the context does, in either
	// order; everything else is in reverse order of adding.
	var rest []string
	for _, e := range events {
		if e != "cache returned" && e != "notifier returned" {
			rest = append(rest, e)
		}
	}
	if want := []string{"late stopped", "API drained", "API returned", "notifier stopped", "stores closed"}; !slices.Equal(rest, want) {
		t.Fatalf("events %v; want %v around the background runs", events, want)
	}
	if !slices.Contains(events, "cache returned") || !slices.Contains(events, "notifier returned") ||
		slices.Index(events, "cache returned") > slices.Index(events, "stores closed") {
		t.Fatalf("events %v: the runs did not end before the stores closed", events)
	}
}
