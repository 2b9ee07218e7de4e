package api

import (
	"context"
	"net/http"
	"sort"

	"github.com/gorilla/mux"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/notify"
)

// Instances runs the v1 instance actions.
type Instances interface {
	CreateInstance(ctx context.Context, req catalog.InstanceRequest) (catalog.InstanceSpec, error)
	UpgradeInstance(ctx context.Context, id string, req catalog.InstanceRequest) (catalog.InstanceSpec, error)
	DeleteInstance(ctx context.Context, id string) error
}

const (
	pRBDefs   = "/v1/rb/definition"
	pRBDef    = pRBDefs + "/{rbName}/{rbVersion}"
	pProfiles = pRBDef + "/profile"
	pProfile  = pProfiles + "/{profileName}"
)

// v1Routes serves the k8splugin-compatible API; bodies are k8splugin's own
// shapes, not EMCO's metadata/spec.
func (s *server) v1Routes(r *mux.Router) {
	cat := s.opts.Catalog
	conns := catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos)
	defs := catalog.For[catalog.RBDefinitionSpec](cat, catalog.RBDefinitions)
	profiles := catalog.For[catalog.RBProfileSpec](cat, catalog.RBProfiles)
	instances := catalog.For[catalog.InstanceSpec](cat, catalog.Instances)
	inUse := func(ctx context.Context, what string, filter bson.M) error {
		n, err := instances.CountWhere(ctx, filter)
		if err != nil {
			return err
		}
		if n > 0 {
			return errdefs.Conflict("%s is in use by instances", what)
		}
		return nil
	}

	// Connectivity info: multipart, part metadata and part file (kubeconfig).
	r.HandleFunc("/v1/connectivity-info", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.ConnectivitySpec
		file, err := s.decodeMultipart(w, r, &spec)
		if err != nil {
			return err
		}
		if err := catalog.ValidateName("cloud region", spec.CloudRegion); err != nil {
			return err
		}
		if _, err := cluster.RESTConfig(file); err != nil {
			return err
		}
		key := catalog.Key{spec.CloudRegion}
		if err := conns.CreateWithContent(r.Context(), key, catalog.Object[catalog.ConnectivitySpec]{Metadata: catalog.Metadata{Name: spec.CloudRegion}, Spec: spec}, file); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/v1/connectivity-info", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, conns, catalog.Key{})
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/connectivity-info/{cloudRegion}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, conns, varsKey(r, []string{"cloudRegion"}))
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/connectivity-info/{cloudRegion}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		region := mux.Vars(r)["cloudRegion"]
		if err := inUse(r.Context(), "cloud region "+region, bson.M{"spec.request.cloudRegion": region}); err != nil {
			return err
		}
		return deleted(w, conns.Delete(r.Context(), catalog.Key{region}))
	})).Methods(http.MethodDelete)

	// Resource bundle definitions and their content.
	r.HandleFunc(pRBDefs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBDefinitionSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		if err := validateNames(map[string]string{"rb-name": spec.RBName, "rb-version": spec.RBVersion}); err != nil {
			return err
		}
		if err := defs.Create(r.Context(), catalog.Key{spec.RBName, spec.RBVersion}, catalog.Object[catalog.RBDefinitionSpec]{Metadata: catalog.Metadata{Name: spec.RBName}, Spec: spec}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pRBDefs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, defs, nil)
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDefs+"/{rbName}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, defs, catalog.Key{mux.Vars(r)["rbName"]})
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDef, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, defs, varsKey(r, []string{"rbName", "rbVersion"}))
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDef, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		v := mux.Vars(r)
		if err := inUse(r.Context(), "rb definition "+v["rbName"]+"/"+v["rbVersion"],
			bson.M{"spec.request.rbName": v["rbName"], "spec.request.rbVersion": v["rbVersion"]}); err != nil {
			return err
		}
		return deleted(w, defs.Delete(r.Context(), catalog.Key{v["rbName"], v["rbVersion"]}))
	})).Methods(http.MethodDelete)
	r.HandleFunc(pRBDef+"/content", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		key := varsKey(r, []string{"rbName", "rbVersion"})
		def, err := defs.Get(r.Context(), key)
		if err != nil {
			return err
		}
		return s.putRawContent(w, r, defs, key, func(ctx context.Context, b []byte) error {
			return s.checkChartNamed(ctx, b, def.Spec.ChartName)
		})
	})).Methods(http.MethodPost)

	// Profiles and their content.
	r.HandleFunc(pProfiles, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBProfileSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		v := mux.Vars(r)
		spec.RBName, spec.RBVersion = v["rbName"], v["rbVersion"] // the URL is authoritative
		if err := catalog.ValidateName("profile", spec.ProfileName); err != nil {
			return err
		}
		key := catalog.Key{spec.RBName, spec.RBVersion, spec.ProfileName}
		if err := profiles.Create(r.Context(), key, catalog.Object[catalog.RBProfileSpec]{Metadata: catalog.Metadata{Name: spec.ProfileName}, Spec: spec}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pProfiles, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, profiles, varsKey(r, []string{"rbName", "rbVersion"}))
	})).Methods(http.MethodGet)
	r.HandleFunc(pProfile, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, profiles, varsKey(r, []string{"rbName", "rbVersion", "profileName"}))
	})).Methods(http.MethodGet)
	r.HandleFunc(pProfile, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		v := mux.Vars(r)
		if err := inUse(r.Context(), "profile "+v["profileName"], bson.M{"spec.request.rbName": v["rbName"],
			"spec.request.rbVersion": v["rbVersion"], "spec.request.profileName": v["profileName"]}); err != nil {
			return err
		}
		return deleted(w, profiles.Delete(r.Context(), catalog.Key{v["rbName"], v["rbVersion"], v["profileName"]}))
	})).Methods(http.MethodDelete)
	r.HandleFunc(pProfile+"/content", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return s.putRawContent(w, r, profiles, varsKey(r, []string{"rbName", "rbVersion", "profileName"}), s.checkProfile)
	})).Methods(http.MethodPost)

	// Instances.
	r.HandleFunc("/v1/instance", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		list, err := instances.List(r.Context(), catalog.Key{})
		if err != nil {
			return err
		}
		q := r.URL.Query()
		out := []catalog.InstanceSpec{}
		for _, i := range list {
			req := i.Spec.Request
			if (q.Get("rb-name") == "" || q.Get("rb-name") == req.RBName) && (q.Get("rb-version") == "" || q.Get("rb-version") == req.RBVersion) &&
				(q.Get("profile-name") == "" || q.Get("profile-name") == req.ProfileName) {
				out = append(out, i.Spec)
			}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})).Methods(http.MethodGet)
	if s.opts.Instances == nil {
		return
	}
	r.HandleFunc("/v1/instance", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var req catalog.InstanceRequest
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
		spec, err := s.opts.Instances.CreateInstance(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/v1/instance/{instanceID}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, instances, varsKey(r, []string{"instanceID"}))
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/instance/{instanceID}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		id := mux.Vars(r)["instanceID"]
		if err := s.opts.Instances.DeleteInstance(r.Context(), id); err != nil {
			return err
		}
		s.forget(r.Context(), notify.InstanceSubject(id))
		w.WriteHeader(http.StatusAccepted)
		return nil
	})).Methods(http.MethodDelete)
	r.HandleFunc("/v1/instance/{instanceID}/upgrade", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var req catalog.InstanceRequest
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
		spec, err := s.opts.Instances.UpgradeInstance(r.Context(), mux.Vars(r)["instanceID"], req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
}

func validateNames(names map[string]string) error {
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := catalog.ValidateName(k, names[k]); err != nil {
			return err
		}
	}
	return nil
}

func listSpecs[S any](w http.ResponseWriter, r *http.Request, res *catalog.Resource[S], parent catalog.Key) error {
	var objs []catalog.Object[S]
	var err error
	if parent == nil {
		objs, err = res.List(r.Context(), catalog.Key{})
	} else if len(parent) == 1 && len(res.Kind().OwnFields()) > 1 {
		// /v1/rb/definition/{name}: every version of one definition.
		all, lerr := res.List(r.Context(), catalog.Key{})
		err = lerr
		for _, o := range all {
			if o.Metadata.Name == parent[0] {
				objs = append(objs, o)
			}
		}
	} else {
		objs, err = res.List(r.Context(), parent)
	}
	if err != nil {
		return err
	}
	out := make([]S, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Spec)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func getSpec[S any](w http.ResponseWriter, r *http.Request, res *catalog.Resource[S], key catalog.Key) error {
	o, err := res.Get(r.Context(), key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, o.Spec)
	return nil
}

func deleted(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// putRawContent stores a raw request body (k8splugin uploads charts and
// profiles that way) after check accepts it.
func (s *server) putRawContent(w http.ResponseWriter, r *http.Request, res interface {
	PutContent(ctx context.Context, key catalog.Key, data []byte) error
}, key catalog.Key, check func(context.Context, []byte) error) error {
	data, err := readUpload(w, r, min(s.opts.MaxUploadBody, s.archiveMax()))
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errdefs.Invalid("the request body is empty; send the archive as the body")
	}
	if err := check(r.Context(), data); err != nil {
		return err
	}
	if err := res.PutContent(r.Context(), key, data); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}
