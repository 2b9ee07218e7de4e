package api

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"sort"

	"github.com/gorilla/mux"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

const (
	pRBDefs    = "/v1/rb/definition"
	pRBDef     = pRBDefs + "/{rbName}/{rbVersion}"
	pProfiles  = pRBDef + "/profile"
	pProfile   = pProfiles + "/{profileName}"
	pTemplates = pRBDef + "/config-template"
	pTemplate  = pTemplates + "/{templateName}"
)

var (
	vRBDef    = []string{"rbName", "rbVersion"}
	vProfile  = []string{"rbName", "rbVersion", "profileName"}
	vTemplate = []string{"rbName", "rbVersion", "templateName"}
)

// connectivityView is a cloud region as k8splugin answers it: with its
// kubeconfig, base64-encoded.
type connectivityView struct {
	catalog.ConnectivitySpec
	Kubeconfig string `json:"kubeconfig"`
}

// v1Routes serves the k8splugin-compatible API; bodies are k8splugin's own
// shapes, not EMCO's metadata/spec, and so are its status codes where a
// client may look at them (docs/k8splugin-compatibility.md). Deletes of
// catalogue objects answer 204 when the object is already gone, as
// k8splugin's do: its KUD scripts delete a definition (and so its
// profiles) before the profiles.
func (s *server) v1Routes(r *mux.Router) {
	s.connectivityRoutes(r)
	s.definitionRoutes(r)
	s.profileRoutes(r)
	s.templateRoutes(r)
	s.instanceRoutes(r)
}

func (s *server) connectivityRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	conns := catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos)
	instances := catalog.For[catalog.InstanceSpec](cat, catalog.Instances)
	view := func(ctx context.Context, o catalog.Object[catalog.ConnectivitySpec]) (connectivityView, error) {
		kc, err := conns.GetContent(ctx, catalog.Key{o.Spec.CloudRegion})
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return connectivityView{}, err
		}
		return connectivityView{ConnectivitySpec: o.Spec, Kubeconfig: base64.StdEncoding.EncodeToString(kc)}, nil
	}

	// Multipart: part metadata and part file (the kubeconfig).
	r.HandleFunc("/v1/connectivity-info", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.ConnectivitySpec
		file, err := s.decodeMultipart(w, r, &spec, cluster.MaxKubeconfigBytes)
		if err != nil {
			return err
		}
		if err := catalog.ValidateName("cloud region", spec.CloudRegion); err != nil {
			return err
		}
		if spec.CloudOwner == "" {
			return errdefs.Invalid("cloud-owner is missing")
		}
		if err := s.checkKubeconfig(file); err != nil {
			return err
		}
		key := catalog.Key{spec.CloudRegion}
		if err := conns.CreateWithContent(r.Context(), key, catalog.Object[catalog.ConnectivitySpec]{Metadata: catalog.Metadata{Name: spec.CloudRegion}, Spec: spec}, file); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, connectivityView{ConnectivitySpec: spec, Kubeconfig: base64.StdEncoding.EncodeToString(file)})
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/v1/connectivity-info", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, conns, catalog.Key{}, s.listPageBytes())
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/connectivity-info/{cloudRegion}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		// k8splugin answers with the region's kubeconfig: the cluster's own
		// credential, which a read-only token may not have.
		if err := needsWrite(r, "a cloud region's connectivity info (it holds the cluster's kubeconfig)"); err != nil {
			return err
		}
		o, err := conns.Get(r.Context(), catalog.Key{mux.Vars(r)["cloudRegion"]})
		if err != nil {
			return err
		}
		v, err := view(r.Context(), o)
		return answer(w, r, v, err)
	})).Methods(http.MethodGet)
	r.HandleFunc("/v1/connectivity-info/{cloudRegion}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		region := mux.Vars(r)["cloudRegion"]
		// The kubeconfig is how rsync reaches the cluster: it stays while
		// anything there may still need deleting.
		n, err := instances.CountWhere(r.Context(), bson.M{"spec.request.cloudRegion": region})
		if err != nil {
			return err
		}
		if n > 0 {
			return errdefs.Conflict("cloud region %s is in use by instances; delete them first", region)
		}
		if s.opts.ClusterInUse != nil {
			ids, err := s.opts.ClusterInUse(r.Context(), appcontext.V1Provider, region)
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				return errdefs.Conflict("cloud region %s still has resources being deleted (contexts %v); try again shortly", region, ids)
			}
		}
		if err := goneOK(conns.Delete(r.Context(), catalog.Key{region})); err != nil {
			return err
		}
		if s.opts.ClusterDeleted != nil {
			s.opts.ClusterDeleted(appcontext.V1Provider, region)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})).Methods(http.MethodDelete)
}

func (s *server) definitionRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	defs := catalog.For[catalog.RBDefinitionSpec](cat, catalog.RBDefinitions)
	profiles := catalog.For[catalog.RBProfileSpec](cat, catalog.RBProfiles)

	r.HandleFunc(pRBDefs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBDefinitionSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		if err := validateNames(map[string]string{"rb-name": spec.RBName, "rb-version": spec.RBVersion}); err != nil {
			return err
		}
		key := catalog.Key{spec.RBName, spec.RBVersion}
		if err := defs.Create(r.Context(), key, catalog.Object[catalog.RBDefinitionSpec]{Metadata: catalog.Metadata{Name: spec.RBName}, Spec: spec}); err != nil {
			return err
		}
		// Every definition comes with a profile "default", as in k8splugin.
		def := catalog.RBProfileSpec{RBName: spec.RBName, RBVersion: spec.RBVersion, ProfileName: catalog.DefaultProfile,
			ReleaseName: catalog.DefaultProfile, Namespace: catalog.DefaultProfile}
		if err := profiles.Create(r.Context(), append(key, catalog.DefaultProfile),
			catalog.Object[catalog.RBProfileSpec]{Metadata: catalog.Metadata{Name: catalog.DefaultProfile}, Spec: def}); err != nil {
			_ = defs.Delete(context.WithoutCancel(r.Context()), key) // no definition without it
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pRBDefs, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, defs, nil, s.listPageBytes())
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDefs+"/{rbName}", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, defs, catalog.Key{mux.Vars(r)["rbName"]}, s.listPageBytes())
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDef, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, defs, varsKey(r, vRBDef))
	})).Methods(http.MethodGet)
	r.HandleFunc(pRBDef, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBDefinitionSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		key := varsKey(r, vRBDef)
		if err := urlWins(map[string][2]string{"rb-name": {spec.RBName, key[0]}, "rb-version": {spec.RBVersion, key[1]}}); err != nil {
			return err
		}
		spec.RBName, spec.RBVersion = key[0], key[1]
		if err := replaceSpec(r.Context(), defs, key, func(cur *catalog.RBDefinitionSpec) { *cur = spec }); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec) // k8splugin answers an update with 201
		return nil
	})).Methods(http.MethodPut)
	// Deleting a definition deletes its chart, its profiles and its config
	// templates. Instances made from it keep running: what they apply is
	// rendered into their contexts.
	r.HandleFunc(pRBDef, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return deleted(w, goneOK(defs.Delete(r.Context(), varsKey(r, vRBDef))))
	})).Methods(http.MethodDelete)
	r.HandleFunc(pRBDef+"/content", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		// k8splugin names the chart after the archive when the definition
		// does not.
		return putChart(s, w, r, defs, varsKey(r, vRBDef), func(def *catalog.RBDefinitionSpec, chart string) {
			if def.ChartName == "" {
				def.ChartName = chart
			}
		})
	})).Methods(http.MethodPost)
}

func (s *server) profileRoutes(r *mux.Router) {
	profiles := catalog.For[catalog.RBProfileSpec](s.opts.Catalog, catalog.RBProfiles)
	check := func(spec *catalog.RBProfileSpec, key catalog.Key) error {
		if err := urlWins(map[string][2]string{"rb-name": {spec.RBName, key[0]}, "rb-version": {spec.RBVersion, key[1]},
			"profile-name": {spec.ProfileName, key[2]}}); err != nil {
			return err
		}
		spec.RBName, spec.RBVersion, spec.ProfileName = key[0], key[1], key[2]
		if err := catalog.ValidateName("profile", spec.ProfileName); err != nil {
			return err
		}
		if spec.ReleaseName == "" {
			spec.ReleaseName = spec.ProfileName // as k8splugin stores it
		}
		if spec.ExtraResourceTypes == nil {
			spec.ExtraResourceTypes = []catalog.GVK{}
		}
		return nil
	}

	r.HandleFunc(pProfiles, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBProfileSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		if spec.ProfileName == "" {
			return errdefs.Invalid("profile-name is missing")
		}
		// The URL names the definition: a body naming another one is refused.
		key := append(varsKey(r, vRBDef), spec.ProfileName)
		if err := check(&spec, key); err != nil {
			return err
		}
		if err := profiles.Create(r.Context(), key, catalog.Object[catalog.RBProfileSpec]{Metadata: catalog.Metadata{Name: spec.ProfileName}, Spec: spec}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pProfiles, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return listSpecs(w, r, profiles, varsKey(r, vRBDef), s.listPageBytes())
	})).Methods(http.MethodGet)
	r.HandleFunc(pProfile, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, profiles, varsKey(r, vProfile))
	})).Methods(http.MethodGet)
	r.HandleFunc(pProfile, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.RBProfileSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		key := varsKey(r, vProfile)
		if err := check(&spec, key); err != nil {
			return err
		}
		if err := replaceSpec(r.Context(), profiles, key, func(cur *catalog.RBProfileSpec) { *cur = spec }); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, spec)
		return nil
	})).Methods(http.MethodPut)
	r.HandleFunc(pProfile, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return deleted(w, goneOK(profiles.Delete(r.Context(), varsKey(r, vProfile))))
	})).Methods(http.MethodDelete)
	r.HandleFunc(pProfile+"/content", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return s.putRawContent(w, r, profiles, varsKey(r, vProfile), s.checkProfile)
	})).Methods(http.MethodPost)
}

// templateListItem is a config template in a list, as k8splugin lists them.
type templateListItem struct {
	TemplateName string `json:"template-name"`
	Description  string `json:"description"`
}

func (s *server) templateRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	defs := catalog.For[catalog.RBDefinitionSpec](cat, catalog.RBDefinitions)
	templates := catalog.For[catalog.ConfigTemplateSpec](cat, catalog.ConfigTemplates)

	r.HandleFunc(pTemplates, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.ConfigTemplateSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		if err := catalog.ValidateName("config template", spec.TemplateName); err != nil {
			return err
		}
		defKey := varsKey(r, vRBDef)
		def, err := defs.Get(r.Context(), defKey)
		if err != nil {
			return err
		}
		// Until content is uploaded, the template is the definition's chart.
		spec.ChartName, spec.HasContent = def.Spec.ChartName, false
		if err := templates.Create(r.Context(), append(defKey, spec.TemplateName),
			catalog.Object[catalog.ConfigTemplateSpec]{Metadata: catalog.Metadata{Name: spec.TemplateName}, Spec: spec}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, spec)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pTemplates, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		list, err := templates.List(r.Context(), varsKey(r, vRBDef))
		if err != nil {
			return err
		}
		out := make([]templateListItem, 0, len(list))
		for _, t := range list {
			out = append(out, templateListItem{TemplateName: t.Spec.TemplateName, Description: t.Spec.Description})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})).Methods(http.MethodGet)
	r.HandleFunc(pTemplate, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return getSpec(w, r, templates, varsKey(r, vTemplate))
	})).Methods(http.MethodGet)
	r.HandleFunc(pTemplate, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var spec catalog.ConfigTemplateSpec
		if err := s.decodeJSON(w, r, &spec); err != nil {
			return err
		}
		key := varsKey(r, vTemplate)
		if err := urlWins(map[string][2]string{"template-name": {spec.TemplateName, key[2]}}); err != nil {
			return err
		}
		// Only the description changes: the chart comes with the content.
		var out catalog.ConfigTemplateSpec
		if err := replaceSpec(r.Context(), templates, key, func(cur *catalog.ConfigTemplateSpec) {
			cur.Description = spec.Description
			out = *cur
		}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, out) // as k8splugin answers
		return nil
	})).Methods(http.MethodPut)
	r.HandleFunc(pTemplate, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return deleted(w, goneOK(templates.Delete(r.Context(), varsKey(r, vTemplate))))
	})).Methods(http.MethodDelete)
	r.HandleFunc(pTemplate+"/content", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		return putChart(s, w, r, templates, varsKey(r, vTemplate), func(t *catalog.ConfigTemplateSpec, chart string) {
			t.ChartName, t.HasContent = chart, true
		})
	})).Methods(http.MethodPost)
}

// replaceSpec changes an existing object's spec (NotFound when there is
// none), keeping its metadata.
func replaceSpec[S any](ctx context.Context, res *catalog.Resource[S], key catalog.Key, change func(*S)) error {
	cur, err := res.Get(ctx, key)
	if err != nil {
		return err
	}
	change(&cur.Spec)
	_, err = res.Put(ctx, key, cur)
	return err
}

// putChart stores an uploaded Helm chart as an object's content, once it
// loads, and lets name record the chart's name in the object.
func putChart[S any](s *server, w http.ResponseWriter, r *http.Request, res *catalog.Resource[S], key catalog.Key, name func(spec *S, chart string)) error {
	cur, err := res.Get(r.Context(), key)
	if err != nil {
		return err
	}
	// A chart-name already given picks the chart of an archive holding
	// several, as k8splugin's does.
	hint := ""
	switch spec := any(&cur.Spec).(type) {
	case *catalog.RBDefinitionSpec:
		hint = spec.ChartName
	case *catalog.ConfigTemplateSpec:
		hint = spec.ChartName
	}
	return s.putRawContent(w, r, res, key, func(ctx context.Context, b []byte) error {
		chart, err := s.checkChartNamed(ctx, b, hint)
		if err != nil {
			return err
		}
		return replaceSpec(ctx, res, key, func(spec *S) { name(spec, chart) })
	})
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

// urlWins refuses a body field that names something else than the URL
// (field → {body value, URL value}); an empty body field takes the URL's.
func urlWins(fields map[string][2]string) error {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := fields[k]; v[0] != "" && v[0] != v[1] {
			return errdefs.Invalid("%s %q does not match the URL's %q", k, v[0], v[1])
		}
	}
	return nil
}

// goneOK treats a delete of what is already gone as done, as k8splugin
// does.
func goneOK(err error) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

func listSpecs[S any](w http.ResponseWriter, r *http.Request, res *catalog.Resource[S], parent catalog.Key, pageBytes int) error {
	if len(parent) == 1 && len(res.Kind().OwnFields()) > 1 {
		// /v1/rb/definition/{name}: every version of one definition.
		name := parent[0]
		return writeJSONList(w, r, func(emit func(any) error) error {
			return res.EachPaged(r.Context(), catalog.Key{}, pageBytes, func(o catalog.Object[S]) error {
				if o.Metadata.Name != name {
					return nil
				}
				return emit(o.Spec)
			})
		})
	}
	if parent == nil {
		parent = catalog.Key{}
	}
	return writeJSONList(w, r, func(emit func(any) error) error {
		return res.EachPaged(r.Context(), parent, pageBytes, func(o catalog.Object[S]) error { return emit(o.Spec) })
	})
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
// profiles that way) after check accepts it, and answers 200 as k8splugin
// does.
func (s *server) putRawContent(w http.ResponseWriter, r *http.Request, res interface {
	PutContent(ctx context.Context, key catalog.Key, data []byte) error
}, key catalog.Key, check func(context.Context, []byte) error) error {
	limit := min(s.opts.MaxUploadBody, s.archiveMax())
	release, err := s.reserveBody(w, r, limit)
	if err != nil {
		return err
	}
	defer release()
	data, err := readUpload(w, r, limit)
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
	w.WriteHeader(http.StatusOK)
	return nil
}
