package aai

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/rungroup"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// Item is the sink's one work item in its ownership kind: one replica
// mirrors every instance.
const Item = "aai"

// Claims hands the sink to this replica (ownership.Kind): the sink says it
// exists (Want) and is called back (Acquired, Released); Guard holds while
// this replica holds it, and every save of a mirroring state needs it.
type Claims interface {
	Want(item string)
	Guard(item string) clientv3.Cmp
}

// Feeds compute an instance's resources; the status engine implements it.
type Feeds interface {
	InstanceFeed(ctx context.Context, id string) (entries []notify.Entry, ready bool, err error)
}

// Options configures a Sink; Client, Catalog, Feeds, States, Etcd and
// Claims are required.
type Options struct {
	Client  ClientOptions
	Catalog *catalog.Catalog
	Feeds   Feeds
	// States keeps each instance's mirroring state ("aai/<instance id>"),
	// as the notifier keeps a subscription's delivery state.
	States *notify.States
	// Etcd carries the purge requests of deleted instances, under
	// Prefix + "/aai-purges/"; Prefix "" means etcdstore.DefaultPrefix.
	Etcd   *clientv3.Client
	Prefix string
	Claims Claims
	// BackoffBase scales retry backoff (tests); 0 means as documented.
	BackoffBase time.Duration
	Logger      *logrus.Entry
}

// Sink mirrors every v1 instance into AAI on the replica that holds it:
// one notify.Worker per instance, whose deliveries go to AAI instead of a
// callback, so its state (what AAI holds, the frozen pending change)
// survives restarts and handovers. A deleted instance's objects are
// removed by the sink's holder, asked through etcd by whichever replica
// served the delete.
type Sink struct {
	opts   Options
	log    *logrus.Entry
	client *client

	// ops serialises starting and stopping workers, so a worker is never
	// started and stopped concurrently for one instance.
	ops sync.Mutex

	// tasks are the goroutines Run owns: workers, checks, purges.
	tasks rungroup.Group

	mu      sync.Mutex
	owned   bool
	workers map[string]*worker // by instance id
	busy    map[string]bool    // instances whose mirroring is being checked
	purging map[string]bool    // instances whose AAI objects a purge loop is removing
	skip    map[string]bool    // instances whose region has no AAI tenant
}

type worker struct {
	w      *notify.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks opts and returns the sink; Run starts it.
func New(opts Options) (*Sink, error) {
	if opts.Catalog == nil || opts.Feeds == nil || opts.States == nil || opts.Etcd == nil || opts.Claims == nil {
		return nil, errors.New("aai: Catalog, Feeds, States, Etcd and Claims are required")
	}
	opts.Prefix = etcdstore.Prefix(opts.Prefix)
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	s := &Sink{opts: opts, log: opts.Logger, workers: map[string]*worker{},
		busy: map[string]bool{}, purging: map[string]bool{}, skip: map[string]bool{}}
	c, err := newClient(opts.Client, s.region)
	if err != nil {
		return nil, err
	}
	s.client = c
	return s, nil
}

// region is an instance's AAI cloud owner and region: its cloud region's
// connectivity info.
func (s *Sink) region(ctx context.Context, id string) (string, string, error) {
	inst, err := catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances).Get(ctx, catalog.Key{id})
	if err != nil {
		return "", "", err
	}
	region := inst.Spec.Request.CloudRegion
	conn, err := catalog.For[catalog.ConnectivitySpec](s.opts.Catalog, catalog.ConnectivityInfos).Get(ctx, catalog.Key{region})
	if err != nil {
		return "", "", err
	}
	return conn.Spec.CloudOwner, region, nil
}

func stateKey(instanceID string) string { return "aai/" + instanceID }

func (s *Sink) purgePrefix() string { return s.opts.Prefix + "/aai-purges/" }

// Run follows the purge requests (etcdwatch) until ctx ends, mirroring
// every instance while this replica holds the sink; then it stops and
// waits for its workers.
func (s *Sink) Run(ctx context.Context) error {
	ctx, stop := s.tasks.Start(ctx)
	defer stop()
	purges, err := etcdwatch.New(etcdwatch.Options{Client: s.opts.Etcd, Prefixes: []string{s.purgePrefix()},
		Apply: s.purgesChanged, Name: "AAI purge requests", Logger: s.log})
	if err != nil {
		return err
	}
	s.opts.Claims.Want(Item)
	purges.Run(ctx)
	return nil
}

// Changed is told the groups whose status may have changed: an instance's
// worker is woken, or started if it does not run. It never blocks.
func (s *Sink) Changed(groups []string) {
	for _, g := range groups {
		group, _ := catalog.ParseGroup(g)
		if group.Kind != catalog.GroupInstance {
			continue
		}
		id := group.Key[0]
		s.mu.Lock()
		wk := s.workers[id]
		s.mu.Unlock()
		if wk != nil {
			wk.w.Notify()
		} else {
			s.ensure(id)
		}
	}
}

// Forget is told that a subject was deleted: a deleted instance's objects
// are removed from AAI by the sink's holder.
func (s *Sink) Forget(ctx context.Context, subj notify.Subject) error {
	if subj.Kind != notify.SubjectInstance {
		return nil
	}
	if _, err := s.opts.Etcd.Put(ctx, s.purgePrefix()+subj.Key[0], "{}"); err != nil {
		return errdefs.Unavailable(err, "cannot ask for the instance's removal from AAI")
	}
	return nil
}

// Acquired makes this replica the sink's: it finishes the purges of
// deleted instances and mirrors every instance.
func (s *Sink) Acquired(string) {
	s.mu.Lock()
	s.owned = true
	s.mu.Unlock()
	s.resume()
}

// Released stops this replica's AAI work; it returns once it stopped.
func (s *Sink) Released(string) {
	// ops first: a check that saw the sink owned and is starting a worker
	// finishes before the workers are collected, and later ones see it not.
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	s.owned = false
	ids := make([]string, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.stop(id)
	}
}

func (s *Sink) isOwned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owned
}

// purgesChanged acts on purge requests while this replica holds the
// sink; after a gap in the watch it resumes every purge.
func (s *Sink) purgesChanged(b etcdwatch.Batch) {
	switch {
	case b.First || !s.isOwned():
		// The sink's holder resumes every purge when it acquires the sink.
	case b.Listed:
		s.resume()
	default:
		for _, ev := range b.Events {
			if !ev.Deleted {
				s.purgeRequested(strings.TrimPrefix(ev.Key, s.purgePrefix()))
			}
		}
	}
}

// resume finishes requested and interrupted purges, then mirrors every
// instance.
func (s *Sink) resume() {
	ctx := s.tasks.Context()
	s.tasks.Go(func() {
		if err := s.resumePurges(ctx); err != nil && ctx.Err() == nil {
			s.log.WithError(err).Warn("cannot resume AAI purges")
		}
		resp, err := s.opts.Etcd.Get(ctx, s.purgePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err == nil {
			for _, kv := range resp.Kvs {
				s.purgeRequested(strings.TrimPrefix(string(kv.Key), s.purgePrefix()))
			}
		}
		err = catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances).Each(ctx, func(key catalog.Key, _ catalog.Object[catalog.InstanceSpec]) error {
			s.ensure(key[0])
			return nil
		})
		if err != nil && ctx.Err() == nil {
			s.log.WithError(err).Warn("cannot resume AAI mirroring")
		}
	})
}

// resumePurges finishes the purges of instances deleted before a restart.
func (s *Sink) resumePurges(ctx context.Context) error {
	states, err := s.opts.States.LoadPrefix(ctx, "aai/")
	if err != nil {
		return err
	}
	for key := range states {
		id := strings.TrimPrefix(key, "aai/")
		_, err := catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances).Get(ctx, catalog.Key{id})
		if errors.Is(err, errdefs.ErrNotFound) {
			s.purge(id)
		}
	}
	return nil
}

// purgeRequested stops a deleted instance's mirroring and purges it.
func (s *Sink) purgeRequested(id string) {
	s.ops.Lock()
	s.stop(id)
	s.ops.Unlock()
	s.purge(id)
}
