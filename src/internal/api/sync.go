package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// digSyncRoute is POST …/deployment-intent-groups/{dig}/sync: re-apply
// what drifted, 202 with what it will touch.
func (s *server) digSyncRoute(r *mux.Router) {
	r.HandleFunc(pDIG+"/sync", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		filter, err := s.syncFilter(w, r)
		if err != nil {
			return err
		}
		res, err := s.opts.Deploy.SyncDIG(r.Context(), varsKey(r, vDIG), filter)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, res)
		return nil
	})).Methods(http.MethodPost)
}

// digWritten makes a PUT's spec.syncPolicy take effect at once in the
// DIG's current context (self-heal starts or stops without an update).
func (s *server) digWritten(ctx context.Context, key catalog.Key, o *catalog.Object[catalog.DIGSpec]) error {
	if s.opts.Deploy == nil {
		return nil
	}
	return s.opts.Deploy.SetSyncPolicy(ctx, key, o.Spec)
}

// strList is a filter value a body may give as one string or a list.
type strList []string

func (l *strList) UnmarshalJSON(data []byte) error {
	var one string
	if json.Unmarshal(data, &one) == nil {
		*l = strList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errdefs.Invalid("a sync filter is a string or a list of strings")
	}
	*l = many
	return nil
}

// syncBody narrows a sync: {"app": …, "cluster": "<provider>+<cluster>",
// "resource": "<name> or <Kind>/<name>"}, each a string or a list (values
// of one ORed, different ones ANDed). emcoctl's {"metadata": {}} and an
// empty body narrow nothing.
type syncBody struct {
	App      strList `json:"app"`
	Cluster  strList `json:"cluster"`
	Resource strList `json:"resource"`
}

// syncFilter reads a sync's filters from the query string and the body
// (both count: their values are ORed per filter).
func (s *server) syncFilter(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	q := r.URL.Query()
	filter := url.Values{"app": q["app"], "cluster": q["cluster"], "resource": q["resource"]}
	release, err := s.reserveBody(w, r, s.opts.MaxJSONBody)
	if err != nil {
		return nil, err
	}
	defer release()
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxJSONBody))
	if err != nil {
		return nil, readError(err, "request body")
	}
	if len(data) == 0 {
		return filter, nil
	}
	var b syncBody
	if err := s.unmarshal(data, &b, "request body"); err != nil {
		return nil, err
	}
	filter["app"] = append(filter["app"], b.App...)
	filter["cluster"] = append(filter["cluster"], b.Cluster...)
	filter["resource"] = append(filter["resource"], b.Resource...)
	return filter, nil
}
