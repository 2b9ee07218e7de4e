package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/status"
)

// StatusReader answers status queries.
type StatusReader interface {
	DIG(ctx context.Context, dig catalog.Key, q url.Values) (any, error)
	Cluster(ctx context.Context, provider, cluster string, q url.Values) (any, error)
	LogicalCloud(ctx context.Context, key catalog.Key, q url.Values) (any, error)
	Instance(ctx context.Context, id string) (status.InstanceStatus, error)
	Query(ctx context.Context, id string, q url.Values) (status.InstanceStatus, error)
	RegionQuery(ctx context.Context, q url.Values) (status.QueryStatus, error)
}

func (s *server) statusRoutes(r *mux.Router) {
	if s.opts.Status == nil {
		return
	}
	r.HandleFunc(pDIG+"/status", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		if watchRequested(r) {
			return s.stream(w, r, digSubject(r), func(ctx context.Context, q url.Values) (any, error) {
				return s.opts.Status.DIG(ctx, varsKey(r, vDIG), q)
			})
		}
		resp, err := s.opts.Status.DIG(r.Context(), varsKey(r, vDIG), r.URL.Query())
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pCluster+"/status", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		v := mux.Vars(r)
		resp, err := s.opts.Status.Cluster(r.Context(), v["clusterProvider"], v["cluster"], r.URL.Query())
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pLC+"/status", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		resp, err := s.opts.Status.LogicalCloud(r.Context(), varsKey(r, vLC), r.URL.Query())
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/instance/{instanceID}/status", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		if watchRequested(r) {
			return s.stream(w, r, instanceSubject(r), func(ctx context.Context, _ url.Values) (any, error) {
				return s.opts.Status.Instance(ctx, mux.Vars(r)["instanceID"])
			})
		}
		resp, err := s.opts.Status.Instance(r.Context(), mux.Vars(r)["instanceID"])
		narrowWith(w, "the objects of one kind, name or labels (GET /v1/instance/{id}/query?ApiVersion=&Kind=&Name=&Labels=)")
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/instance/{instanceID}/query", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		resp, err := s.opts.Status.Query(r.Context(), mux.Vars(r)["instanceID"], r.URL.Query())
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/query", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		resp, err := s.opts.Status.RegionQuery(r.Context(), r.URL.Query())
		return answer(w, r, resp, err)
	})).Methods(http.MethodGet)
}

// answer writes a status answer: as it is encoded when it can be.
func answer(w http.ResponseWriter, r *http.Request, resp any, err error) error {
	if err != nil {
		return err
	}
	if st, ok := resp.(streamer); ok {
		writeStream(w, r, st)
		return nil
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
