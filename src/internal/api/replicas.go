package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/gorilla/mux"
)

// Replica is one live orchestrator replica and the work it owns.
type Replica struct {
	ID           string    `json:"id"`
	URL          string    `json:"url"`
	Started      time.Time `json:"started"`
	LeaseExpires time.Time `json:"lease-expires"`
	// Clusters whose watcher it runs, "<provider>+<cluster>".
	Clusters []string `json:"clusters"`
	// Subscriptions whose worker it runs: "dig/<project>/<composite app>/<version>/<dig>/<name>"
	// or "instance/<id>/<name>".
	Subscriptions []string `json:"subscriptions"`
	// DIGs whose rsync actions and history it runs, "<project>/<composite app>/<version>/<dig>".
	DIGs []string `json:"digs"`
	// Instances (v1) whose rsync actions and history it runs.
	Instances []string `json:"instances"`
	// Groups it owns that are neither: logical clouds ("lc:…") and
	// clusters' network intents ("cluster:…").
	Groups []string `json:"groups,omitempty"`
	// Sinks it runs ("aai").
	Sinks []string `json:"sinks,omitempty"`
}

// ReplicaSet lists the live replicas.
type ReplicaSet interface {
	Replicas(ctx context.Context) ([]Replica, error)
}

// Consistency gives API clients read-your-writes over the replicas' caches
// (status, history), which follow etcd with a watch.
type Consistency interface {
	// Revision is the store's revision now (a linearizable read).
	Revision(ctx context.Context) (int64, error)
	// WaitRevision returns once this replica's caches reflect rev.
	WaitRevision(ctx context.Context, rev int64) error
}

// Headers of the read-your-writes protocol: every answer to a request
// that may write carries RevisionHeader, the store's revision once the
// request's writes were visible to this replica's reads; a request with
// MinRevisionHeader is answered once this replica's caches reflect that
// revision, whichever replica wrote it.
const (
	RevisionHeader    = "X-Argus-Revision"
	MinRevisionHeader = "X-Argus-Min-Revision"
)

// consistencyWait bounds how long a request waits for this replica's
// caches; past it the request is answered from the cache as it is.
const consistencyWait = 5 * time.Second

func (s *server) systemRoutes(r *mux.Router) {
	if s.opts.Replicas == nil {
		return
	}
	r.HandleFunc("/v2/system/replicas", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		list, err := s.opts.Replicas.Replicas(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, struct {
			Replicas []Replica `json:"replicas"`
		}{list})
		return nil
	})).Methods(http.MethodGet)
}

// mutating reports whether a request may write.
func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// consistent makes a writer read its writes: the answer to a request that
// may write is held until this replica's caches reflect the store's
// revision at that moment, and names it; a request naming a revision waits
// until the caches reach it.
func (s *server) consistent(next http.Handler) http.Handler {
	if s.opts.Consistency == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpenPath(r.URL.Path) { // probes and the console read no store: no token, no wait
			next.ServeHTTP(w, r)
			return
		}
		if v := r.Header.Get(MinRevisionHeader); v != "" {
			if rev, err := strconv.ParseInt(v, 10, 64); err == nil && rev > 0 {
				// Never past the store's own revision: a revision from the
				// future would hold every such request for the whole wait.
				ctx, cancel := context.WithTimeout(r.Context(), consistencyWait)
				if cur, err := s.opts.Consistency.Revision(ctx); err == nil {
					s.waitRevision(r, min(rev, cur))
				}
				cancel()
			}
		}
		if !mutating(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		synced := false
		sync := func() {
			if synced {
				return
			}
			synced = true
			ctx, cancel := context.WithTimeout(r.Context(), consistencyWait)
			defer cancel()
			rev, err := s.opts.Consistency.Revision(ctx)
			if err != nil {
				return // the answer goes out as it is; the store's error shows elsewhere
			}
			s.waitRevision(r, rev)
			w.Header().Set(RevisionHeader, strconv.FormatInt(rev, 10))
		}
		hooked := httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(code int) { sync(); next(code) }
			},
			Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
				return func(b []byte) (int, error) { sync(); return next(b) }
			},
		})
		next.ServeHTTP(hooked, r)
	})
}

func (s *server) waitRevision(r *http.Request, rev int64) {
	ctx, cancel := context.WithTimeout(r.Context(), consistencyWait)
	defer cancel()
	if err := s.opts.Consistency.WaitRevision(ctx, rev); err != nil {
		loggerFrom(r.Context()).WithError(err).WithField("revision", rev).Warn("answering before this replica's caches reached the revision")
	}
}
