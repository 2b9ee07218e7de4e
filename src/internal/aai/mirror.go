package aai

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/notify"
)

// envelope is what a mirroring worker's payload carries besides its
// changes: the instance, as an instance subscription's does.
type envelope struct {
	InstanceID string `json:"instance-id"`
	Ready      bool   `json:"ready"`
}

// source computes an instance's current resources for its worker.
func (s *Sink) source(id string) notify.Source {
	return func(ctx context.Context) (notify.Runs, any, error) {
		entries, ready, err := s.opts.Feeds.InstanceFeed(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		return notify.Runs{entries}, envelope{InstanceID: id, Ready: ready}, nil
	}
}

// ensure starts an instance's mirroring worker unless it runs; it checks
// the instance exists, so the changes of a deleted instance's termination
// do not bring mirroring back.
func (s *Sink) ensure(id string) {
	s.mu.Lock()
	_, running := s.workers[id]
	ctx := s.tasks.Context()
	// One check at a time per instance, and none for an instance known not
	// to be mirrorable (its region has no tenant): a busy instance must not
	// queue a lookup per change.
	skip := running || ctx == nil || !s.owned || s.busy[id] || s.skip[id]
	if !skip {
		s.busy[id] = true
	}
	s.mu.Unlock()
	if skip {
		return
	}
	s.tasks.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.busy, id)
			s.mu.Unlock()
		}()
		s.ops.Lock()
		defer s.ops.Unlock()
		s.mu.Lock()
		_, running := s.workers[id]
		owned := s.owned
		s.mu.Unlock()
		if running || !owned {
			return
		}
		if _, err := catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances).Get(ctx, catalog.Key{id}); err != nil {
			return
		}
		if err := s.start(ctx, id); err != nil {
			s.log.WithError(err).WithField("instance", id).Error("cannot start AAI mirroring")
		}
	})
}

// start runs an instance's worker; the caller holds ops.
func (s *Sink) start(ctx context.Context, id string) error {
	// Where the instance's objects live is kept with the state: the purge
	// after a delete can no longer look the instance up.
	base, err := s.client.tenantURL(ctx, id)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalid) {
			s.mu.Lock()
			s.skip[id] = true
			s.mu.Unlock()
		}
		s.log.WithError(err).WithField("instance", id).Warn("instance not mirrored into AAI")
		return nil
	}
	st, _, err := s.opts.States.Load(ctx, stateKey(id))
	if err == nil && st.Target != base {
		st.Target = base
		err = s.opts.States.SaveIf(ctx, stateKey(id), st, s.opts.Claims.Guard(Item))
	}
	if err != nil {
		return err
	}
	w, err := notify.NewWorker(notify.WorkerOptions{Key: stateKey(id), Source: s.source(id), States: s.opts.States,
		Deliverer: s.client.sender(id, base), BackoffBase: s.opts.BackoffBase,
		Guard:  func() clientv3.Cmp { return s.opts.Claims.Guard(Item) },
		Logger: s.log.WithField("sink", "aai")})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	wk := &worker{w: w, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.workers[id] = wk
	s.mu.Unlock()
	started := s.tasks.Go(func() { // a resumed worker first catches up with what changed
		defer close(wk.done)
		if err := w.Run(wctx); err != nil {
			s.log.WithError(err).WithField("instance", id).Error("AAI mirroring worker stopped")
		}
	})
	if !started {
		close(wk.done)
	}
	return nil
}

// stop ends an instance's worker and waits for it; the caller holds ops.
func (s *Sink) stop(id string) {
	s.mu.Lock()
	wk := s.workers[id]
	delete(s.workers, id)
	s.mu.Unlock()
	if wk == nil {
		return
	}
	wk.cancel()
	<-wk.done
}

// purge removes a deleted instance's objects from AAI in the background,
// retrying until AAI answers; the mirroring state is kept until then, so
// a restart resumes the purge (see resumePurges).
func (s *Sink) purge(id string) {
	s.mu.Lock()
	ctx := s.tasks.Context()
	// One purge loop per instance: resumes after every watch reconnect ask
	// again for the purges still running.
	running := s.purging[id]
	s.purging[id] = true
	s.mu.Unlock()
	if running {
		return
	}
	done := func() {
		s.mu.Lock()
		delete(s.purging, id)
		s.mu.Unlock()
	}
	if !s.tasks.Go(func() {
		defer done()
		for attempt := 1; s.isOwned(); attempt++ {
			err := s.purgeOnce(ctx, id)
			if err == nil {
				if _, err := s.opts.Etcd.Delete(ctx, s.purgePrefix()+id); err != nil {
					s.log.WithError(err).WithField("instance", id).Warn("cannot clear a finished AAI purge request")
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			s.log.WithError(err).WithField("instance", id).Warn("cannot remove a deleted instance from AAI; retrying")
			if !backoff.Sleep(ctx, notify.ScaledBackoff(s.opts.BackoffBase, attempt)) {
				return
			}
		}
	}) {
		done() // the sink is stopping
	}
}

func (s *Sink) purgeOnce(ctx context.Context, id string) error {
	st, found, err := s.opts.States.LoadWhole(ctx, stateKey(id))
	if errors.Is(err, notify.ErrFrozenLost) {
		// What the lost payload named may stay in AAI; the rest goes.
		s.log.WithError(err).WithField("instance", id).Warn("purging without the pending payload's resources")
		st.Pending, err = nil, nil
	}
	if err != nil || !found {
		return err
	}
	keys := map[string]bool{}
	for k := range st.Delivered {
		keys[k] = true
	}
	if st.Pending != nil { // it may have reached AAI in part
		for k := range st.Pending.Delta {
			keys[k] = true
		}
	}
	deletes := make([]string, 0, len(keys))
	for k := range keys {
		deletes = append(deletes, k)
	}
	sort.Strings(deletes)
	if st.Target == "" { // never mirrored
		return s.opts.States.Delete(ctx, stateKey(id))
	}
	if res := s.client.apply(ctx, st.Target, id, rand.Text(), nil, deletes); res.Outcome != notify.Delivered {
		return fmt.Errorf("purge: %w", res.Err)
	}
	return s.opts.States.Delete(ctx, stateKey(id))
}
