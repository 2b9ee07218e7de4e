package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/notify"
)

// Instances runs the v1 instance actions and the config API.
type Instances interface {
	CreateInstance(ctx context.Context, req catalog.InstanceRequest) (catalog.InstanceSpec, error)
	UpgradeInstance(ctx context.Context, id string, req catalog.InstanceRequest) (catalog.InstanceSpec, error)
	DeleteInstance(ctx context.Context, id string) error
	GetFullInstance(ctx context.Context, id string) (deploy.FullInstance, error)

	CreateConfig(ctx context.Context, id string, c catalog.ConfigContent) (deploy.ConfigResult, error)
	UpdateConfig(ctx context.Context, id, name string, c catalog.ConfigContent) (deploy.ConfigResult, error)
	DeleteConfig(ctx context.Context, id, name string) (deploy.ConfigResult, error)
	RemoveConfig(ctx context.Context, id, name string) error
	RollbackConfig(ctx context.Context, id, name, version, tag string) (deploy.ConfigResult, error)
	TagConfig(ctx context.Context, id, name, tag string) (catalog.ConfigTag, error)
	ListConfigs(ctx context.Context, id string) ([]deploy.ConfigView, error)
	GetConfig(ctx context.Context, id, name, version, tag string) (deploy.ConfigView, error)
	ConfigVersions(ctx context.Context, id, name string) ([]deploy.ConfigView, error)
	ConfigTags(ctx context.Context, id, name string) ([]catalog.ConfigTag, error)

	// SyncInstance re-applies what drifted (narrowed by cluster, resource).
	SyncInstance(ctx context.Context, id string, filter url.Values) (deploy.SyncResult, error)
}

var _ Instances = (*deploy.Service)(nil)

const (
	pInstance = "/v1/instance/{instanceID}"
	pConfigs  = pInstance + "/config"
	pConfig   = pConfigs + "/{configName}"
)

// instanceListItem is an instance in a list: k8splugin lists them without
// their resources.
type instanceListItem struct {
	ID          string                  `json:"id"`
	Request     catalog.InstanceRequest `json:"request"`
	ReleaseName string                  `json:"release-name"`
	Namespace   string                  `json:"namespace"`
}

func (s *server) instanceRoutes(r *mux.Router) {
	instances := catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances)
	r.HandleFunc("/v1/instance", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		return writeJSONList(w, r, func(emit func(any) error) error {
			return instances.EachPaged(r.Context(), catalog.Key{}, s.listPageBytes(), func(i catalog.Object[catalog.InstanceSpec]) error {
				req := i.Spec.Request
				if (q.Get("rb-name") == "" || q.Get("rb-name") == req.RBName) && (q.Get("rb-version") == "" || q.Get("rb-version") == req.RBVersion) &&
					(q.Get("profile-name") == "" || q.Get("profile-name") == req.ProfileName) {
					return emit(instanceListItem{ID: i.Spec.ID, Request: req, ReleaseName: i.Spec.ReleaseName, Namespace: i.Spec.Namespace})
				}
				return nil
			})
		})
	})).Methods(http.MethodGet)
	if s.opts.Instances == nil {
		return
	}
	inst := s.opts.Instances
	r.HandleFunc("/v1/instance", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var req catalog.InstanceRequest
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
		spec, err := inst.CreateInstance(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pInstance, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id := mux.Vars(r)["instanceID"]
		if full, _ := strconv.ParseBool(r.URL.Query().Get("full")); full {
			v, err := inst.GetFullInstance(r.Context(), id)
			return answer(w, r, v, err)
		}
		return getSpec(w, r, instances, catalog.Key{id})
	})).Methods(http.MethodGet)
	r.HandleFunc(pInstance, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id := mux.Vars(r)["instanceID"]
		if err := inst.DeleteInstance(r.Context(), id); err != nil {
			return err
		}
		s.forget(r.Context(), notify.InstanceSubject(id))
		w.WriteHeader(http.StatusAccepted)
		return nil
	})).Methods(http.MethodDelete)
	r.HandleFunc(pInstance+"/upgrade", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var req catalog.InstanceRequest
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
		spec, err := inst.UpgradeInstance(r.Context(), mux.Vars(r)["instanceID"], req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pInstance+"/sync", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		filter, err := s.syncFilter(w, r)
		if err != nil {
			return err
		}
		res, err := inst.SyncInstance(r.Context(), mux.Vars(r)["instanceID"], filter)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, res)
		return nil
	})).Methods(http.MethodPost)
	s.configRoutes(r, inst)
}

// rollbackTarget is a version or a tag to roll a config back to.
type rollbackTarget struct {
	ConfigVersion json.RawMessage `json:"config-version"`
	ConfigTag     string          `json:"config-tag"`
}

// rollbackBody is a rollback request: k8splugin's handler decodes the
// body itself as the target ({"config-version":"2"}, what CDS sends);
// k8splugin's own type, and so some clients, wrap it in "anyOf".
type rollbackBody struct {
	rollbackTarget
	AnyOf *rollbackTarget `json:"anyOf"`
}

// target is the wrapped target when the body has one, else the top level.
func (b rollbackBody) target() rollbackTarget {
	if b.AnyOf != nil && (len(b.AnyOf.ConfigVersion) > 0 || b.AnyOf.ConfigTag != "") {
		return *b.AnyOf
	}
	return b.rollbackTarget
}

// version reads config-version, which k8splugin's clients send as a
// string ("2") and others as a number.
func (t rollbackTarget) version() (string, error) {
	raw := strings.TrimSpace(string(t.ConfigVersion))
	if raw == "" || raw == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(t.ConfigVersion, &s) == nil {
		return s, nil
	}
	var n uint
	if err := json.Unmarshal(t.ConfigVersion, &n); err != nil {
		return "", errdefs.Unprocessable(err, "config-version is neither a string nor a number")
	}
	return strconv.FormatUint(uint64(n), 10), nil
}

func (s *server) configRoutes(r *mux.Router, inst Instances) {
	ids := func(r *http.Request) (string, string) {
		v := mux.Vars(r)
		return v["instanceID"], v["configName"]
	}
	r.HandleFunc(pConfigs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var c catalog.ConfigContent
		if err := s.decodeJSON(w, r, &c); err != nil {
			return err
		}
		res, err := inst.CreateConfig(r.Context(), mux.Vars(r)["instanceID"], c)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, res)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pConfigs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		l, err := inst.ListConfigs(r.Context(), mux.Vars(r)["instanceID"])
		return answer(w, r, l, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pConfig, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		v, err := inst.GetConfig(r.Context(), id, name, "", "")
		return answer(w, r, v, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pConfig, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var c catalog.ConfigContent
		if err := s.decodeJSON(w, r, &c); err != nil {
			return err
		}
		id, name := ids(r)
		res, err := inst.UpdateConfig(r.Context(), id, name, c)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, res) // as k8splugin answers
		return nil
	})).Methods(http.MethodPut)
	r.HandleFunc(pConfig, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		if err := inst.RemoveConfig(r.Context(), id, name); err != nil {
			return err
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	})).Methods(http.MethodDelete)
	r.HandleFunc(pConfig+"/delete", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		res, err := inst.DeleteConfig(r.Context(), id, name)
		return answer(w, r, res, err)
	})).Methods(http.MethodPost)
	r.HandleFunc(pConfig+"/rollback", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var b rollbackBody
		if err := s.decodeJSON(w, r, &b); err != nil {
			return err
		}
		t := b.target()
		version, err := t.version()
		if err != nil {
			return err
		}
		id, name := ids(r)
		res, err := inst.RollbackConfig(r.Context(), id, name, version, t.ConfigTag)
		return answer(w, r, res, err)
	})).Methods(http.MethodPost)
	r.HandleFunc(pConfig+"/tagit", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var b struct {
			TagName string `json:"tag-name"`
		}
		if err := s.decodeJSON(w, r, &b); err != nil {
			return err
		}
		id, name := ids(r)
		t, err := inst.TagConfig(r.Context(), id, name, b.TagName)
		return answer(w, r, t, err)
	})).Methods(http.MethodPost)
	r.HandleFunc(pConfig+"/tag", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		l, err := inst.ConfigTags(r.Context(), id, name)
		return answer(w, r, l, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pConfig+"/tag/{tagName}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		v, err := inst.GetConfig(r.Context(), id, name, "", mux.Vars(r)["tagName"])
		return answer(w, r, v, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pConfig+"/version", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		l, err := inst.ConfigVersions(r.Context(), id, name)
		return answer(w, r, l, err)
	})).Methods(http.MethodGet)
	r.HandleFunc(pConfig+"/version/{configVersion}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id, name := ids(r)
		v, err := inst.GetConfig(r.Context(), id, name, mux.Vars(r)["configVersion"], "")
		return answer(w, r, v, err)
	})).Methods(http.MethodGet)
}
