package api

import (
	"context"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// EMCO's day-2 routes: a DIG's rollback and migrate, app dependencies,
// and the kv-pairs of clusters (clm) and logical clouds (dcm).

// rollbackSpec is EMCO's rollback body: {"spec": {"revision": "N"}}.
type rollbackSpec struct {
	Metadata struct {
		Description string `json:"description"`
	} `json:"metadata"`
	Spec struct {
		Revision string `json:"revision"`
	} `json:"spec"`
}

// migrateSpec is EMCO's migrate body.
type migrateSpec struct {
	Metadata struct {
		Description string `json:"description"`
	} `json:"metadata"`
	Spec struct {
		TargetCompositeAppVersion   string `json:"targetCompositeAppVersion"`
		TargetDeploymentIntentGroup string `json:"targetDeploymentIntentGroup"`
	} `json:"spec"`
}

// maxKvValue is the longest kv-pair value EMCO's schema accepts.
const maxKvValue = 128

func (s *server) dayTwoRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	if s.opts.Deploy != nil {
		r.HandleFunc(pDIG+"/rollback", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			var b rollbackSpec
			if err := s.decodeJSON(w, r, &b); err != nil {
				return err
			}
			if b.Spec.Revision == "" {
				return errdefs.Invalid("spec.revision is missing")
			}
			if _, err := s.opts.Deploy.Rollback(r.Context(), varsKey(r, vDIG), b.Spec.Revision); err != nil {
				return err
			}
			w.WriteHeader(http.StatusAccepted)
			return nil
		})).Methods(http.MethodPost)
		r.HandleFunc(pDIG+"/migrate", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			var b migrateSpec
			if err := s.decodeJSON(w, r, &b); err != nil {
				return err
			}
			if b.Spec.TargetCompositeAppVersion == "" || b.Spec.TargetDeploymentIntentGroup == "" {
				return errdefs.Invalid("spec.targetCompositeAppVersion and spec.targetDeploymentIntentGroup are required")
			}
			if err := s.opts.Deploy.Migrate(r.Context(), varsKey(r, vDIG), b.Spec.TargetCompositeAppVersion, b.Spec.TargetDeploymentIntentGroup); err != nil {
				return err
			}
			w.WriteHeader(http.StatusAccepted)
			return nil
		})).Methods(http.MethodPost)
	}

	vApp := append(append([]string{}, vCA...), "app")
	registerCRUD(r, s, crud[catalog.AppDependencySpec]{res: catalog.For[catalog.AppDependencySpec](cat, catalog.AppDependencies),
		collection: pCA + "/apps/{app}/dependency", item: pCA + "/apps/{app}/dependency/{dependency}",
		parentVars: vApp, itemVars: []string{"dependency"},
		validate: func(o *catalog.Object[catalog.AppDependencySpec]) error { return deploy.ValidateDependency(&o.Spec) },
		beforeWrite: func(ctx context.Context, key catalog.Key, o *catalog.Object[catalog.AppDependencySpec]) error {
			// A dependency names another app of the composite app; cycles
			// are refused when the DIG is approved (and instantiated).
			if o.Spec.App == key[3] {
				return errdefs.Invalid("app %q cannot depend on itself", o.Spec.App)
			}
			_, err := catalog.For[catalog.Empty](cat, catalog.Apps).Get(ctx, catalog.Key{key[0], key[1], key[2], o.Spec.App})
			if errors.Is(err, errdefs.ErrNotFound) {
				return errdefs.Invalid("spec.app %q is not an app of the composite app", o.Spec.App)
			}
			return err
		}})

	kvView := func(r *http.Request, o catalog.Object[catalog.KvPairsSpec]) (any, error) {
		key := r.URL.Query().Get("key")
		if key == "" {
			return o, nil
		}
		for _, m := range o.Spec.Kv {
			if v, ok := m[key]; ok {
				return struct {
					Value string `json:"value"`
				}{v}, nil
			}
		}
		return nil, errdefs.NotFound("kv pair %q has no key %q", o.Metadata.Name, key)
	}
	registerCRUD(r, s, crud[catalog.KvPairsSpec]{res: catalog.For[catalog.KvPairsSpec](cat, catalog.ClusterKvPairs),
		collection: pCluster + "/kv-pairs", item: pCluster + "/kv-pairs/{clusterKv}", parentVars: vCluster,
		itemVars: []string{"clusterKv"}, validate: validateKv, view: kvView})
	registerCRUD(r, s, crud[catalog.KvPairsSpec]{res: catalog.For[catalog.KvPairsSpec](cat, catalog.LogicalCloudKvPairs),
		collection: pLC + "/kv-pairs", item: pLC + "/kv-pairs/{logicalCloudKv}", parentVars: vLC,
		itemVars: []string{"logicalCloudKv"}, validate: validateKv, view: kvView, noPut: true})
}

// validateKv follows EMCO's kv-pair schema: spec.kv is required, its
// values are strings of at most 128 characters.
func validateKv(o *catalog.Object[catalog.KvPairsSpec]) error {
	if o.Spec.Kv == nil {
		return errdefs.Invalid("spec.kv is missing")
	}
	for _, m := range o.Spec.Kv {
		for k, v := range m {
			if utf8.RuneCountInString(v) > maxKvValue {
				return errdefs.Invalid("spec.kv value of %q is longer than %d characters", k, maxKvValue)
			}
		}
	}
	return nil
}
