package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Deployer runs DIG lifecycle actions.
type Deployer interface {
	Approve(ctx context.Context, dig catalog.Key) error
	Instantiate(ctx context.Context, dig catalog.Key) (string, error)
	// Update returns the revision it made; Rollback returns the DIG to an
	// earlier one (making the next); Migrate hands the deployment to
	// another DIG of the composite app.
	Update(ctx context.Context, dig catalog.Key) (int64, error)
	Rollback(ctx context.Context, dig catalog.Key, revision string) (int64, error)
	Migrate(ctx context.Context, dig catalog.Key, targetVersion, targetDIG string) error
	Terminate(ctx context.Context, dig catalog.Key) error
	Stop(ctx context.Context, dig catalog.Key) error
	// SyncDIG re-applies what drifted (narrowed by app, cluster,
	// resource); SetSyncPolicy makes a PUT's spec.syncPolicy take effect
	// at once.
	SyncDIG(ctx context.Context, dig catalog.Key, filter url.Values) (deploy.SyncResult, error)
	SetSyncPolicy(ctx context.Context, dig catalog.Key, spec catalog.DIGSpec) error
	ApplyNetworks(ctx context.Context, provider, cluster string) (string, error)
	TerminateNetworks(ctx context.Context, provider, cluster string) error
}

// Path templates of the v2 API.
const (
	pProviders = "/v2/cluster-providers"
	pProvider  = pProviders + "/{clusterProvider}"
	pClusters  = pProvider + "/clusters"
	pCluster   = pClusters + "/{cluster}"
	pProjects  = "/v2/projects"
	pProject   = pProjects + "/{project}"
	pCAs       = pProject + "/composite-apps"
	pCA        = pCAs + "/{compositeApp}/{version}"
	pDIGs      = pCA + "/deployment-intent-groups"
	pDIG       = pDIGs + "/{deploymentIntentGroup}"
	pGPIs      = pDIG + "/generic-placement-intents"
)

var (
	vProvider = []string{"clusterProvider"}
	vCluster  = []string{"clusterProvider", "cluster"}
	vProject  = []string{"project"}
	vCA       = []string{"project", "compositeApp", "version"}
	vDIG      = []string{"project", "compositeApp", "version", "deploymentIntentGroup"}
	vGPI      = append(append([]string{}, vDIG...), "genericPlacementIntent")
)

func (s *server) v2Routes(r *mux.Router) { //nolint:funlen // route table
	cat := s.opts.Catalog
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.ClusterProviders),
		collection: pProviders, item: pProvider, itemVars: vProvider})
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.Clusters),
		collection: pClusters, item: pCluster, parentVars: vProvider, itemVars: []string{"cluster"},
		upload: func(_ context.Context, b []byte) error { return s.checkKubeconfig(b) }, maxFile: cluster.MaxKubeconfigBytes, noPut: true,
		checkSpec: checkClusterSpec, listView: s.clustersView,
		beforeDelete: func(ctx context.Context, key catalog.Key) error {
			if s.opts.ClusterInUse == nil {
				return nil
			}
			ids, err := s.opts.ClusterInUse(ctx, key[0], key[1])
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				return errdefs.Conflict("cluster %s+%s is in use by deployed contexts %s; terminate them first", key[0], key[1], strings.Join(ids, ", "))
			}
			return nil
		},
		afterDelete: func(_ context.Context, key catalog.Key) error {
			if s.opts.ClusterDeleted != nil {
				s.opts.ClusterDeleted(key[0], key[1])
			}
			return nil
		}})
	registerLabels(r, s)
	for _, n := range []struct {
		kind *catalog.Kind
		path string
	}{{catalog.Networks, "/networks"}, {catalog.ProviderNetworks, "/provider-networks"}} {
		registerCRUD(r, s, crud[catalog.NetworkSpec]{res: catalog.For[catalog.NetworkSpec](cat, n.kind),
			collection: pCluster + n.path, item: pCluster + n.path + "/{name}", parentVars: vCluster, itemVars: []string{"name"}})
	}

	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.Projects),
		collection: pProjects, item: pProject, itemVars: vProject})
	registerCRUD(r, s, crud[catalog.CompositeAppSpec]{res: catalog.For[catalog.CompositeAppSpec](cat, catalog.CompositeApps),
		collection: pCAs, item: pCA, parentVars: vProject, itemVars: []string{"compositeApp", "version"},
		ownKey: func(o *catalog.Object[catalog.CompositeAppSpec]) []string {
			return []string{o.Metadata.Name, o.Spec.Version}
		},
		validate: func(o *catalog.Object[catalog.CompositeAppSpec]) error {
			if o.Spec.Version == "" {
				return errdefs.Invalid("spec.compositeAppVersion is missing")
			}
			return nil
		}})
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.Apps),
		collection: pCA + "/apps", item: pCA + "/apps/{app}", parentVars: vCA, itemVars: []string{"app"}, noPut: true,
		validate: func(o *catalog.Object[catalog.Empty]) error {
			if len(o.Metadata.Name) > deploy.MaxAppName {
				return errdefs.Invalid("app name %q is longer than %d characters", o.Metadata.Name, deploy.MaxAppName)
			}
			return nil
		},
		upload: s.checkChart, maxFile: s.archiveMax()})
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.CompositeProfiles),
		collection: pCA + "/composite-profiles", item: pCA + "/composite-profiles/{compositeProfile}", parentVars: vCA, itemVars: []string{"compositeProfile"}})
	registerCRUD(r, s, crud[catalog.AppProfileSpec]{res: catalog.For[catalog.AppProfileSpec](cat, catalog.AppProfiles),
		collection: pCA + "/composite-profiles/{compositeProfile}/profiles", item: pCA + "/composite-profiles/{compositeProfile}/profiles/{profile}",
		parentVars: append(append([]string{}, vCA...), "compositeProfile"), itemVars: []string{"profile"}, noPut: true,
		validate: func(o *catalog.Object[catalog.AppProfileSpec]) error {
			if o.Spec.App == "" {
				return errdefs.Invalid("spec.app is missing")
			}
			return nil
		},
		upload: s.checkProfile, maxFile: s.archiveMax()})
	registerCRUD(r, s, crud[catalog.DIGSpec]{res: catalog.For[catalog.DIGSpec](cat, catalog.DeploymentIntentGroups),
		collection: pDIGs, item: pDIG, parentVars: vCA, itemVars: []string{"deploymentIntentGroup"},
		validate: func(o *catalog.Object[catalog.DIGSpec]) error {
			if o.Spec.CompositeProfile == "" {
				return errdefs.Invalid("spec.compositeProfile is missing")
			}
			if !appcontext.ValidFieldValidation(o.Spec.FieldValidation) {
				return errdefs.Invalid("spec.fieldValidation %q is not one of Strict, Warn, Ignore", o.Spec.FieldValidation)
			}
			return nil
		},
		afterWrite:   s.digWritten,
		afterCreate:  s.digCreated,
		beforeDelete: s.lockDIGForDelete,
		abortDelete: func(ctx context.Context, key catalog.Key) error {
			return s.opts.Catalog.UnlockForDelete(ctx, catalog.DIGGroup(key))
		},
		afterDelete: s.digDeleted(cat)})
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.GenericPlacementIntents),
		collection: pGPIs, item: pGPIs + "/{genericPlacementIntent}", parentVars: vDIG, itemVars: []string{"genericPlacementIntent"}})
	registerCRUD(r, s, crud[catalog.AppIntentSpec]{res: catalog.For[catalog.AppIntentSpec](cat, catalog.AppIntents),
		collection: pGPIs + "/{genericPlacementIntent}/app-intents", item: pGPIs + "/{genericPlacementIntent}/app-intents/{appIntent}",
		parentVars: vGPI, itemVars: []string{"appIntent"},
		validate: func(o *catalog.Object[catalog.AppIntentSpec]) error {
			if o.Spec.App == "" {
				return errdefs.Invalid("spec.app is missing")
			}
			if len(o.Spec.Intent.AllOf)+len(o.Spec.Intent.AnyOf) == 0 {
				return errdefs.Invalid("spec.intent has neither allOf nor anyOf")
			}
			return nil
		}})
	registerCRUD(r, s, crud[catalog.DIGIntentSpec]{res: catalog.For[catalog.DIGIntentSpec](cat, catalog.DIGIntents),
		collection: pDIG + "/intents", item: pDIG + "/intents/{intent}", parentVars: vDIG, itemVars: []string{"intent"},
		validate: func(o *catalog.Object[catalog.DIGIntentSpec]) error { return deploy.ValidateIntent(o.Spec) }})

	if s.opts.Deploy != nil {
		for _, a := range []string{"approve", "instantiate", "terminate", "stop", "update"} {
			r.HandleFunc(pDIG+"/"+a, s.handle(s.digAction(a))).Methods(http.MethodPost)
		}
		s.digSyncRoute(r)
		r.HandleFunc(pCluster+"/apply", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			v := mux.Vars(r)
			if _, err := s.opts.Deploy.ApplyNetworks(r.Context(), v["clusterProvider"], v["cluster"]); err != nil {
				return err
			}
			w.WriteHeader(http.StatusAccepted)
			return nil
		})).Methods(http.MethodPost)
		r.HandleFunc(pCluster+"/terminate", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
			v := mux.Vars(r)
			if err := s.opts.Deploy.TerminateNetworks(r.Context(), v["clusterProvider"], v["cluster"]); err != nil {
				return err
			}
			w.WriteHeader(http.StatusAccepted)
			return nil
		})).Methods(http.MethodPost)
	}
}

// digAction runs a lifecycle action; the body is ignored (emcoctl sends none
// or {"metadata":{}}). Work continues after the 202.
func (s *server) digAction(action string) handlerFunc {
	return func(s *server, w http.ResponseWriter, r *http.Request) error {
		dig := varsKey(r, vDIG)
		var err error
		switch action {
		case "approve":
			err = s.opts.Deploy.Approve(r.Context(), dig)
		case "instantiate":
			_, err = s.opts.Deploy.Instantiate(r.Context(), dig)
		case "terminate":
			err = s.opts.Deploy.Terminate(r.Context(), dig)
		case "stop":
			err = s.opts.Deploy.Stop(r.Context(), dig)
		case "update":
			// EMCO answers an update with the new revision number.
			rev, err := s.opts.Deploy.Update(r.Context(), dig)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusAccepted, rev)
			return nil
		}
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
}

// digCreated starts a new DIG's history with its creation, as EMCO's does.
func (s *server) digCreated(ctx context.Context, dig catalog.Key) error {
	_, err := s.opts.Catalog.TransitionDIG(ctx, dig, []string{catalog.StateCreated},
		catalog.StateAction{State: catalog.StateCreated, TimeStamp: time.Now().UTC()}, "")
	return err
}

// lockDIGForDelete refuses to delete a DIG whose resources are deployed,
// and locks its lifecycle so no action starts while it goes.
func (s *server) lockDIGForDelete(ctx context.Context, dig catalog.Key) error {
	err := s.opts.Catalog.LockForDelete(ctx, catalog.DIGGroup(dig), "the deployment intent group",
		[]string{catalog.StateCreated, catalog.StateApproved, catalog.StateTerminated})
	if errors.Is(err, errdefs.ErrConflict) {
		return fmt.Errorf("%w; terminate it before deleting it", err)
	}
	return err
}

// labelBody is EMCO's cluster label shape.
type labelBody struct {
	ClusterLabel string `json:"clusterLabel"`
}

func registerLabels(r *mux.Router, s *server) {
	labels := catalog.For[catalog.Empty](s.opts.Catalog, catalog.ClusterLabels)
	coll, item := pCluster+"/labels", pCluster+"/labels/{clusterLabel}"
	r.HandleFunc(coll, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var b labelBody
		if err := s.decodeJSON(w, r, &b); err != nil {
			return err
		}
		if err := catalog.ValidateName("cluster label", b.ClusterLabel); err != nil {
			return err
		}
		key := append(varsKey(r, vCluster), b.ClusterLabel)
		if err := labels.Create(r.Context(), key, catalog.Object[catalog.Empty]{Metadata: catalog.Metadata{Name: b.ClusterLabel}}); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, b)
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(coll, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		list, err := labels.List(r.Context(), varsKey(r, vCluster))
		if err != nil {
			return err
		}
		out := make([]labelBody, 0, len(list))
		for _, l := range list {
			out = append(out, labelBody{l.Metadata.Name})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})).Methods(http.MethodGet)
	r.HandleFunc(item, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		l, err := labels.Get(r.Context(), varsKey(r, vCluster, []string{"clusterLabel"}))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, labelBody{l.Metadata.Name})
		return nil
	})).Methods(http.MethodGet)
	r.HandleFunc(item, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		if err := labels.Delete(r.Context(), varsKey(r, vCluster, []string{"clusterLabel"})); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})).Methods(http.MethodDelete)
}

// checkKubeconfig refuses a kubeconfig that would run a command or read a
// local file, naming the field (v2 cluster and v1 connectivity uploads).
func (s *server) checkKubeconfig(data []byte) error {
	_, err := cluster.ParseKubeconfig(data, s.opts.Kubeconfig)
	return err
}
