package heal

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// Contexts is the watch-fed view of the contexts (appcontext.Cache).
type Contexts interface {
	Latest(ctx context.Context, group string) (string, error)
	View(ctx context.Context, id string, f func(*appcontext.Context, map[appcontext.ClusterRef]appcontext.ClusterState)) error
	Groups(ctx context.Context) ([]string, error)
}

// Drift says what drifted in a context (status.Reader).
type Drift interface {
	Drifted(ctx context.Context, id string, filter url.Values) ([]appcontext.Drifted, error)
}

// Healer re-applies what drifted (deploy.Service).
type Healer interface {
	Sync(ctx context.Context, group, id string, filter url.Values, by string, pick func(appcontext.Drifted) bool) (deploy.SyncResult, error)
}

// Owner says whether this replica runs a group's actions.
type Owner interface {
	Owns(group string) bool
}

var (
	_ Healer   = (*deploy.Service)(nil)
	_ Contexts = (*appcontext.Cache)(nil)
)

// Options configures a Controller; Contexts, Drift, Healer and Owner are
// required.
type Options struct {
	Contexts Contexts
	Drift    Drift
	Healer   Healer
	Owner    Owner
	// Delay is how long a resource stays drifted before it is healed, and
	// the first step of the backoff; 0 means 2s.
	Delay time.Duration
	// MaxBackoff caps the wait between heals of a resource something keeps
	// undoing; 0 means 5m.
	MaxBackoff time.Duration
	Logger     *logrus.Entry
	Now        func() time.Time
}

// Controller heals the groups this replica owns.
type Controller struct {
	opts Options
	log  *logrus.Entry

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[string] // while Run runs
	// seen is when each drifted resource of a group was first seen so.
	seen map[string]map[string]time.Time
}

// New returns a Controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Contexts == nil || opts.Drift == nil || opts.Healer == nil || opts.Owner == nil {
		return nil, errors.New("heal: Contexts, Drift, Healer and Owner are required")
	}
	if opts.Delay <= 0 {
		opts.Delay = 2 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Controller{opts: opts, log: opts.Logger, seen: map[string]map[string]time.Time{}}, nil
}

// Changed is told the groups a batch of changes touched; it never blocks.
func (c *Controller) Changed(groups []string) {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q == nil {
		return
	}
	for _, g := range groups {
		if c.opts.Owner.Owns(g) {
			q.Add(g)
		}
	}
}

// Acquired looks at a group this replica was just handed.
func (c *Controller) Acquired(group string) { c.Changed([]string{group}) }

// Run heals until ctx ends, then stops its worker and waits for it. It
// first looks at every group known.
func (c *Controller) Run(ctx context.Context) error {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "self-heal"})
	c.mu.Lock()
	c.queue = q
	c.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		q.ShutDown()
		wg.Wait()
		c.mu.Lock()
		c.queue = nil
		c.mu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c.next(ctx, q) {
		}
	}()
	groups, err := c.opts.Contexts.Groups(ctx)
	if err != nil && ctx.Err() == nil {
		return err
	}
	c.Changed(groups)
	<-ctx.Done()
	return nil
}

func (c *Controller) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	group, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(group)
	after, err := c.check(ctx, group)
	switch {
	case errors.Is(err, errdefs.ErrConflict):
		// An action runs on the group: its end changes the group, and the
		// rate limiter's growing delay covers a change that is missed.
		q.AddRateLimited(group)
	case err != nil && ctx.Err() == nil:
		c.log.WithError(err).WithField("group", group).Warn("self-heal: cannot heal; trying again")
		q.AddRateLimited(group)
	case after > 0:
		q.Forget(group)
		q.AddAfter(group, after)
	default:
		q.Forget(group)
	}
	return true
}

// check heals what is due in the group and says when to look again (0:
// when something changes).
func (c *Controller) check(ctx context.Context, group string) (time.Duration, error) {
	if !c.opts.Owner.Owns(group) {
		c.forget(group)
		return 0, nil
	}
	id, err := c.opts.Contexts.Latest(ctx, group)
	if err != nil || id == "" {
		return 0, err
	}
	heal := false
	err = c.opts.Contexts.View(ctx, id, func(cx *appcontext.Context, _ map[appcontext.ClusterRef]appcontext.ClusterState) {
		heal = cx != nil && cx.Meta.SyncPolicy.SelfHeal && deployed(cx.Status.Status)
	})
	if err != nil {
		return 0, err
	}
	if !heal {
		c.forget(group)
		return 0, nil
	}
	drifted, err := c.opts.Drift.Drifted(ctx, id, nil)
	if err != nil {
		return 0, err
	}
	due, next := c.schedule(group, drifted, c.opts.Now())
	if len(due) == 0 {
		return next, nil
	}
	res, err := c.opts.Healer.Sync(ctx, group, id, nil, appcontext.HealBySelfHeal, func(d appcontext.Drifted) bool { return due[key(d)] })
	if err != nil {
		return 0, err
	}
	c.log.WithFields(logrus.Fields{"group": group, "context": id, "resources": len(res.Resources)}).Info("self-heal: re-applying what drifted")
	return next, nil
}

func deployed(status string) bool {
	switch status {
	case appcontext.Instantiated, appcontext.InstantiateFailed, appcontext.Updated, appcontext.UpdateFailed:
		return true
	}
	return false
}

func key(d appcontext.Drifted) string { return d.App + "\x00" + d.Cluster.String() + "\x00" + d.Key }

// schedule picks the resources due for a heal now, and when the next of
// the others is due (0 if none). A resource is due once it has been seen
// drifted for Delay (and was applied at least Delay ago), and, while a
// streak of heals goes on, Delay·2^streak after its last heal.
func (c *Controller) schedule(group string, drifted []appcontext.Drifted, now time.Time) (map[string]bool, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.seen[group]
	seen := make(map[string]time.Time, len(drifted))
	due := map[string]bool{}
	var next time.Duration
	for _, d := range drifted {
		if d.Was == syncstate.Unknown {
			continue // nothing recorded to compare with: only an explicit sync re-applies it
		}
		k := key(d)
		first, ok := prev[k]
		if !ok {
			first = now
		}
		seen[k] = first
		at := first.Add(c.opts.Delay)
		if t := d.Applied.Add(c.opts.Delay); t.After(at) {
			at = t
		}
		if h := d.Heal; h != nil && now.Sub(h.Last) < appcontext.HealStreakWindow {
			if t := h.Last.Add(c.backoff(h.Streak)); t.After(at) {
				at = t
			}
		}
		if wait := at.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		due[k] = true
	}
	if len(seen) == 0 {
		delete(c.seen, group)
	} else {
		c.seen[group] = seen
	}
	return due, next
}

// backoff is the wait after a heal that is the streak's nth.
func (c *Controller) backoff(streak int) time.Duration {
	d := c.opts.Delay << min(max(streak, 0), 20)
	if d <= 0 || d > c.opts.MaxBackoff {
		d = c.opts.MaxBackoff
	}
	return d
}

func (c *Controller) forget(group string) {
	c.mu.Lock()
	delete(c.seen, group)
	c.mu.Unlock()
}
