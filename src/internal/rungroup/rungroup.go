package rungroup

import (
	"context"
	"sync"
)

// Group is the goroutines of one run; its zero value is ready to Start.
type Group struct {
	mu       sync.Mutex
	ctx      context.Context
	stopping bool // set once stop waits for the goroutines; none may start after
	wg       sync.WaitGroup
}

// Start begins the run under a context of its own, derived from ctx, and
// returns it with stop, which cancels it, refuses new goroutines and
// waits for those running. A failed start of the caller's run so stops
// what it already started instead of waiting for it forever.
func (g *Group) Start(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	g.mu.Lock()
	g.ctx = ctx
	g.mu.Unlock()
	return ctx, func() {
		cancel()
		g.mu.Lock()
		g.stopping = true
		g.mu.Unlock()
		g.wg.Wait()
	}
}

// Context is the run's context; nil before Start.
func (g *Group) Context() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx
}

// Go runs f on a goroutine the run's stop waits for, and reports whether
// it did: not before Start, nor once the run is stopping.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping || g.ctx == nil {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}
