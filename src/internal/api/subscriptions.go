package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/status"
)

// Subscriptions serves status subscriptions (SPEC section 8) and watches.
type Subscriptions interface {
	Create(ctx context.Context, subj notify.Subject, sub notify.Subscription) (notify.View, error)
	Put(ctx context.Context, subj notify.Subject, name string, sub notify.Subscription) (notify.View, bool, error)
	Get(ctx context.Context, subj notify.Subject, name string) (notify.View, error)
	List(ctx context.Context, subj notify.Subject) ([]notify.View, error)
	Delete(ctx context.Context, subj notify.Subject, name string) error
	// Forget is told that a subject was deleted with its subscriptions.
	Forgetter
	Watch(subj notify.Subject, sub notify.Subscription, lastSeq int64) *notify.Watch
}

// Forgetter is told that a subject was deleted.
type Forgetter interface {
	Forget(ctx context.Context, subj notify.Subject) error
}

const (
	pInstanceSubs = "/v1/instance/{instanceID}/status/subscription"
	pDIGSubs      = pDIG + "/status/subscriptions"
)

func instanceSubject(r *http.Request) notify.Subject {
	return notify.InstanceSubject(mux.Vars(r)["instanceID"])
}

func digSubject(r *http.Request) notify.Subject { return notify.DIGSubject(varsKey(r, vDIG)) }

func (s *server) subscriptionRoutes(r *mux.Router) {
	if s.opts.Subscriptions == nil {
		return
	}
	for _, c := range []struct {
		collection string
		subject    func(*http.Request) notify.Subject
	}{{pInstanceSubs, instanceSubject}, {pDIGSubs, digSubject}} {
		subject := c.subject
		item := c.collection + "/{subscriptionName}"
		r.HandleFunc(c.collection, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			var sub notify.Subscription
			if err := s.decodeJSON(w, r, &sub); err != nil {
				return err
			}
			v, err := s.opts.Subscriptions.Create(r.Context(), subject(r), sub)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusCreated, v)
			return nil
		})).Methods(http.MethodPost)
		r.HandleFunc(c.collection, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			l, err := s.opts.Subscriptions.List(r.Context(), subject(r))
			return answer(w, r, l, err)
		})).Methods(http.MethodGet)
		r.HandleFunc(item, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			v, err := s.opts.Subscriptions.Get(r.Context(), subject(r), mux.Vars(r)["subscriptionName"])
			return answer(w, r, v, err)
		})).Methods(http.MethodGet)
		r.HandleFunc(item, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			var sub notify.Subscription
			if err := s.decodeJSON(w, r, &sub); err != nil {
				return err
			}
			v, created, err := s.opts.Subscriptions.Put(r.Context(), subject(r), mux.Vars(r)["subscriptionName"], sub)
			return putAnswer(w, v, created, err)
		})).Methods(http.MethodPut)
		r.HandleFunc(item, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			if err := s.opts.Subscriptions.Delete(r.Context(), subject(r), mux.Vars(r)["subscriptionName"]); err != nil {
				return err
			}
			w.WriteHeader(http.StatusAccepted) // as k8splugin answers
			return nil
		})).Methods(http.MethodDelete)
	}
}

// forget tells the notifier and the Forgetters a subject is gone, and
// drops its history. The delete itself succeeded, so a failure here is
// logged, not answered.
func (s *server) forget(ctx context.Context, subj notify.Subject) {
	s.forgetHistory(ctx, subj)
	if s.opts.Subscriptions != nil {
		if err := s.opts.Subscriptions.Forget(context.WithoutCancel(ctx), subj); err != nil {
			loggerFrom(ctx).WithError(err).Warn("cannot stop the deleted subject's subscriptions")
		}
	}
	for _, f := range s.opts.Forgetters {
		if err := f.Forget(context.WithoutCancel(ctx), subj); err != nil {
			loggerFrom(ctx).WithError(err).Warn("cannot forget the deleted subject")
		}
	}
}

// watchRequested reports ?watch=true (or 1).
func watchRequested(r *http.Request) bool {
	w, _ := strconv.ParseBool(r.URL.Query().Get("watch"))
	return w
}

// filtersOf reads a watch's status filters from the query, as a status
// query reads them (EMCO's status= spelling included). A watch follows the
// current instance, so instance= is refused.
func filtersOf(r *http.Request) (notify.Subscription, error) {
	q, err := status.ParseQuery(r.URL.Query())
	if err != nil {
		return notify.Subscription{}, err
	}
	if q.Instance != "" || q.ListInstances {
		return notify.Subscription{}, errdefs.Invalid("watch=true follows the current instance; instance= cannot be combined with it")
	}
	spec := catalog.SubscriptionSpec{Type: q.Type, Output: q.Output, App: q.Apps, Resource: q.Resources}
	for _, c := range q.Clusters {
		spec.Cluster = append(spec.Cluster, c.String())
	}
	return notify.Subscription{SubscriptionSpec: spec}, nil
}

// stream serves GET .../status?watch=true as Server-Sent Events: the
// current status first, then one event per change, ids being sequence
// numbers. A client that reconnects with Last-Event-ID continues the
// numbering and gets a fresh snapshot, which carries everything it missed.
func (s *server) stream(w http.ResponseWriter, r *http.Request, subj notify.Subject, snapshot func(context.Context, url.Values) (any, error)) error {
	if s.opts.Subscriptions == nil {
		return errdefs.Unavailable(nil, "watch is not available: this server has no notifier")
	}
	sub, err := filtersOf(r)
	if err != nil {
		return err
	}
	release, err := s.openStream(w)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // ends the history follow whatever ends the stream
	// History is followed from before the snapshot: an entry recorded in
	// between is sent rather than lost.
	follow, err := s.followHistory(ctx, r, subj)
	if err != nil {
		return err
	}
	last, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	watch := s.opts.Subscriptions.Watch(subj, sub, max(last, 0))
	defer watch.Close()
	// The baseline comes before the snapshot: a change in between is then
	// sent again rather than lost.
	seq, err := watch.Baseline(ctx)
	if err != nil {
		return err
	}
	// The snapshot answers the very filters the change events follow.
	snap, err := snapshot(ctx, sub.Query())
	if err != nil {
		return err
	}
	var followed clientv3.WatchChan
	if follow != nil {
		followed = follow.C()
	}
	sw := s.startStream(w, r)
	if err := sw.event(seq, "snapshot", snap); err != nil {
		return nil // the client went away
	}
	heartbeat := time.NewTicker(s.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			if err := sw.comment("heartbeat"); err != nil {
				return nil
			}
		case <-watch.Changed():
			seq, data, ok, err := watch.Next(ctx)
			if err != nil {
				// The subject went away, or the stores failed: say so and end;
				// the client reconnects and learns which.
				_ = sw.event(0, "error", map[string]string{"error": err.Error()})
				return nil
			}
			if ok {
				if err := sw.event(seq, "change", json.RawMessage(data)); err != nil {
					return nil
				}
			}
		case resp, open := <-followed:
			entries, err := follow.Entries(resp)
			if !open || err != nil {
				followed = nil // the stream goes on without history
				continue
			}
			// History events carry no id: Last-Event-ID numbers the
			// snapshot and change events; GET …/history has the past.
			for _, e := range entries {
				if err := sw.event(0, "history", e); err != nil {
					return nil
				}
			}
		}
	}
}

// DefaultMaxStreams is how many watch streams may be open at once unless
// Options.MaxStreams says otherwise.
const DefaultMaxStreams = 1024

// openStream counts a watch stream in, or refuses it with 503 when
// MaxStreams are open; release counts it out.
func (s *server) openStream(w http.ResponseWriter) (release func(), err error) {
	if n := s.streams.Add(1); n > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		w.Header().Set("Retry-After", "30")
		return nil, errdefs.Unavailable(nil, "%d watch streams are open, the most this server allows; retry later", s.opts.MaxStreams)
	}
	s.metrics.streams.Inc()
	return func() {
		s.streams.Add(-1)
		s.metrics.streams.Dec()
	}, nil
}

// streamWriter writes Server-Sent Events, each write with its own
// deadline.
type streamWriter struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// startStream sends a text/event-stream answer's headers. A stream
// outlives the server's read and write timeouts, which guard ordinary
// requests: it has its own heartbeat, and each write its own deadline, so
// a client that stops reading is cut off all the same. (Recorders in tests
// support neither; the errors say so, nothing more.)
func (s *server) startStream(w http.ResponseWriter, r *http.Request) *streamWriter {
	if a := answerWriterOf(w); a != nil {
		a.passThrough()
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.StreamWriteTimeout))
	w.WriteHeader(http.StatusOK)
	return &streamWriter{ctx: r.Context(), w: w, rc: rc, timeout: s.opts.StreamWriteTimeout}
}

func (sw *streamWriter) event(id int64, event string, v any) error {
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	if st, ok := v.(streamer); ok { // a status answer: encoded as it is written
		return writeStreamedEvent(sw.ctx, sw.w, sw.rc, id, event, st)
	}
	return writeEvent(sw.w, sw.rc, id, event, v)
}

func (sw *streamWriter) comment(text string) error {
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	return writeComment(sw.w, sw.rc, text)
}

func writeComment(w http.ResponseWriter, rc *http.ResponseController, text string) error {
	if _, err := fmt.Fprintf(w, ": %s\n\n", text); err != nil {
		return err
	}
	return rc.Flush()
}

// writeStreamedEvent is writeEvent for a status answer, whose JSON is
// written as it is encoded (one line: it holds no newline).
func writeStreamedEvent(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, id int64, event string, v streamer) error {
	if id > 0 {
		if _, err := fmt.Fprintf(w, "id: %d\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: ", event); err != nil {
		return err
	}
	if err := v.WriteJSON(ctx, w); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "\n\n"); err != nil {
		return err
	}
	return rc.Flush()
}

func writeEvent(w http.ResponseWriter, rc *http.ResponseController, id int64, event string, v any) error {
	data, err := json.Marshal(v) // compact: one line, as a data field needs
	if err != nil {
		return err
	}
	if id > 0 {
		if _, err := fmt.Fprintf(w, "id: %d\n", id); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	return rc.Flush()
}

// digDeleted is the afterDelete of a DIG.
func (s *server) digDeleted(cat *catalog.Catalog) func(ctx context.Context, key catalog.Key) error {
	return func(ctx context.Context, key catalog.Key) error {
		s.forget(ctx, notify.DIGSubject(key))
		return cat.DeleteDIGState(ctx, key)
	}
}
