package api

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/status"
)

// History reads the recorded transitions of DIGs and v1 instances, by
// change-routing group.
type History interface {
	List(ctx context.Context, group string, f history.Filter) ([]history.Entry, error)
	// Follow delivers entries as any replica appends them, until ctx ends.
	Follow(ctx context.Context, group string, f history.Filter) *history.Follower
	// Delete drops a deleted subject's history.
	Delete(ctx context.Context, group string) error
}

// OverviewReader summarises every DIG, instance and cluster.
type OverviewReader interface {
	Overview(ctx context.Context) (status.Overview, error)
	ClusterOverview(ctx context.Context) (status.ClusterOverview, error)
}

// Changes tells a listener that some group changed, without blocking.
type Changes interface {
	ListenAll(f func()) (remove func())
}

// historyAnswer is GET …/status/history.
type historyAnswer struct {
	History []history.Entry `json:"history"`
}

func (s *server) historyRoutes(r *mux.Router) {
	if s.opts.History == nil {
		return
	}
	for _, c := range []struct {
		path    string
		subject func(*http.Request) notify.Subject
		exists  func(*http.Request) error
	}{
		{pDIG + "/status/history", digSubject, func(r *http.Request) error {
			_, err := catalog.For[catalog.DIGSpec](s.opts.Catalog, catalog.DeploymentIntentGroups).Get(r.Context(), varsKey(r, vDIG))
			return err
		}},
		{pInstance + "/status/history", instanceSubject, func(r *http.Request) error {
			_, err := catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances).Get(r.Context(), catalog.Key{mux.Vars(r)["instanceID"]})
			return err
		}},
	} {
		r.HandleFunc(c.path, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			f, err := history.ParseFilter(r.URL.Query())
			if err != nil {
				return err
			}
			if err := c.exists(r); err != nil {
				return err
			}
			l, err := s.opts.History.List(r.Context(), c.subject(r).Group(), f)
			narrowWith(w, "the entries since a time, or of some resources (?since=, ?app=, ?cluster=, ?resource=)")
			return answer(w, r, historyAnswer{History: l}, err)
		})).Methods(http.MethodGet)
	}
}

// followHistory starts following a watched subject's history with the
// stream's filters, unless the client asked for history=false; nil when
// there is nothing to follow.
func (s *server) followHistory(ctx context.Context, r *http.Request, subj notify.Subject) (*history.Follower, error) {
	if s.opts.History == nil {
		return nil, nil
	}
	if v := r.URL.Query().Get("history"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, errdefs.Invalid("history %.20q is not true or false", v)
		}
		if !on {
			return nil, nil
		}
	}
	q := r.URL.Query()
	q.Del("since") // a stream follows from now; GET …/history has the past
	f, err := history.ParseFilter(q)
	if err != nil {
		return nil, err
	}
	return s.opts.History.Follow(ctx, subj.Group(), f), nil
}

// forgetHistory drops a deleted subject's history; as with its
// subscriptions, a failure is logged, not answered.
func (s *server) forgetHistory(ctx context.Context, subj notify.Subject) {
	if s.opts.History == nil {
		return
	}
	if err := s.opts.History.Delete(context.WithoutCancel(ctx), subj.Group()); err != nil {
		loggerFrom(ctx).WithError(err).Warn("cannot delete the deleted subject's history")
	}
}

// overviewInterval is the least time between two overview events of one
// stream: an overview costs a pass over every subject.
const overviewInterval = time.Second

func (s *server) overviewRoutes(r *mux.Router) {
	if s.opts.Overview == nil {
		return
	}
	r.HandleFunc("/v2/overview", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		if watchRequested(r) {
			return s.streamOverview(w, r)
		}
		o, err := s.opts.Overview.Overview(r.Context())
		return answer(w, r, o, err)
	})).Methods(http.MethodGet)
	r.HandleFunc("/v2/overview/clusters", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		o, err := s.opts.Overview.ClusterOverview(r.Context())
		return answer(w, r, o, err)
	})).Methods(http.MethodGet)
}

// streamOverview serves GET /v2/overview?watch=true: an "overview" event
// now and after changes, at most one per overviewInterval.
func (s *server) streamOverview(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Changes == nil {
		return errdefs.Unavailable(nil, "watch is not available: this server has no notifier")
	}
	release, err := s.openStream(w)
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	changed := make(chan struct{}, 1)
	remove := s.opts.Changes.ListenAll(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer remove()
	// The first overview is the stream's own: the catalogue (a DIG just
	// created) announces no change, so a shared one could be stale. The
	// ones that follow changes are shared.
	first, err := s.opts.Overview.Overview(ctx)
	if err != nil {
		return err
	}
	sw := s.startStream(w, r)
	if err := sw.event(0, "overview", first); err != nil {
		return nil
	}
	heartbeat := time.NewTicker(s.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	var seq int64 = 1
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			if err := sw.comment("heartbeat"); err != nil {
				return nil
			}
		case <-changed:
			o, err := s.overviews.get(ctx)
			if err != nil {
				_ = sw.event(0, "error", map[string]string{"error": err.Error()})
				return nil
			}
			seq++
			if err := sw.event(seq, "overview", o); err != nil {
				return nil
			}
			// Changes meanwhile wait in the channel for the next round.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(overviewInterval):
			}
		}
	}
}

// sharedOverview gives every overview stream one computation per change:
// an overview costs a pass over every subject, and each stream asking for
// its own made N streams cost N passes a change. A value computed after
// the latest change is shared; while one is being computed, others wait
// for it.
type sharedOverview struct {
	compute func(context.Context) (status.Overview, error)
	gen     atomic.Uint64 // changes seen

	mu     sync.Mutex
	value  status.Overview
	valid  bool
	at     uint64        // the gen value was computed after
	flight chan struct{} // closed when the computation running ends
}

// newSharedOverview follows changes (for the server's life) to know when
// a computed overview is stale.
func newSharedOverview(r OverviewReader, changes Changes) *sharedOverview {
	o := &sharedOverview{compute: r.Overview}
	changes.ListenAll(func() { o.gen.Add(1) })
	return o
}

// get returns an overview computed after every change seen so far.
func (o *sharedOverview) get(ctx context.Context) (status.Overview, error) {
	want := o.gen.Load()
	for {
		o.mu.Lock()
		if o.valid && o.at >= want {
			v := o.value
			o.mu.Unlock()
			return v, nil
		}
		if wait := o.flight; wait != nil {
			o.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return status.Overview{}, ctx.Err()
			}
		}
		o.flight = make(chan struct{})
		start := o.gen.Load()
		o.mu.Unlock()
		v, err := o.compute(ctx)
		o.mu.Lock()
		if err == nil {
			o.value, o.valid, o.at = v, true, start
		}
		close(o.flight)
		o.flight = nil
		o.mu.Unlock()
		return v, err
	}
}
