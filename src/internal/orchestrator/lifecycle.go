package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sirupsen/logrus"
)

// lifecycle holds the orchestrator's parts in the order the assembly adds
// them, each with what runs it (a goroutine for the app's lifetime: a
// watch loop, a server) and what stops it (a Close). start runs the
// parts' goroutines in that order; stop undoes everything in reverse —
// the shape of a stack of defers, but named, logged and in one place, so
// a phase added later (fleet mode's hub) adds its parts and their
// teardown with them.
//
// Every run shares one context, derived from the app's: when the app's
// context ends, all of them are told at once (as the HTTP drain starts).
// stop then takes the parts in reverse order: it calls a part's stop,
// which is what ends a server's run (a drain), and waits for its run,
// before it goes on to the parts added before it.
type lifecycle struct {
	log *logrus.Entry

	mu      sync.Mutex
	parts   []*part
	ctx     context.Context // the runs' context, set by the first start
	cancel  context.CancelFunc
	stopped bool
}

// part is one piece of the running orchestrator.
type part struct {
	name string
	run  func(ctx context.Context) error // nil: nothing runs
	stop func() error                    // nil: nothing to stop; else called before run is waited for

	started bool
	exited  chan struct{} // closed when run returned
	err     error         // run's result, once exited is closed
}

func newLifecycle(log *logrus.Entry) *lifecycle { return &lifecycle{log: log} }

// add appends a part. Its run starts with the next start; its stop runs
// in stop, after those of every part added later.
func (l *lifecycle) add(name string, run func(context.Context) error, stop func() error) *part {
	p := &part{name: name, run: run, stop: stop, exited: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		panic("orchestrator: part " + name + " added after stop")
	}
	l.parts = append(l.parts, p)
	return p
}

// onStop appends a part that only needs stopping.
func (l *lifecycle) onStop(name string, stop func() error) { l.add(name, nil, stop) }

// start runs the goroutines of the parts added since the last start, in
// the order they were added, under a context that ends with ctx or stop.
func (l *lifecycle) start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(ctx)
	}
	for _, p := range l.parts {
		if p.run == nil || p.started {
			continue
		}
		p.started = true
		go func() {
			defer close(p.exited)
			p.err = p.run(l.ctx)
		}()
	}
}

// stop cancels the runs, then, from the last part added to the first,
// calls each part's stop and waits for its run (logging how it ended). It
// returns the stops' errors, joined.
func (l *lifecycle) stop() error {
	l.mu.Lock()
	l.stopped = true
	if l.cancel != nil {
		l.cancel()
	}
	parts := l.parts
	l.mu.Unlock()
	var errs []error
	for _, p := range slices.Backward(parts) {
		if p.stop != nil {
			if err := p.stop(); err != nil {
				l.log.WithError(err).WithField("part", p.name).Warn("stopping failed")
				errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			}
		}
		if p.started {
			<-p.exited
			if p.err != nil && !errors.Is(p.err, context.Canceled) {
				l.log.WithError(p.err).Errorf("%s stopped", p.name)
			}
		}
	}
	return errors.Join(errs...)
}
