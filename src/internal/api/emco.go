package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/gac"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
)

// Clouds runs logical cloud lifecycle actions and guards their changes.
type Clouds interface {
	InstantiateCloud(ctx context.Context, key catalog.Key) (string, error)
	TerminateCloud(ctx context.Context, key catalog.Key) error
	UpdateCloud(ctx context.Context, key catalog.Key) error
	StopCloud(ctx context.Context, key catalog.Key) error
	// CloudDeletable refuses deleting a cloud on its clusters; CloudDeleted
	// cleans up after a delete.
	CloudDeletable(ctx context.Context, key catalog.Key) error
	CloudDeleted(ctx context.Context, key catalog.Key) error
	// CloudChangeable refuses changing a cloud's references, permissions
	// or quotas while an action on it is in flight; CloudSpecChangeable
	// refuses changing its level, namespace or user while it is deployed.
	CloudChangeable(ctx context.Context, key catalog.Key) error
	CloudSpecChangeable(ctx context.Context, key catalog.Key, spec catalog.LogicalCloudSpec) error
	// Kubeconfig is a standard cloud's user's kubeconfig for one reference.
	Kubeconfig(ctx context.Context, project, cloud, reference string) ([]byte, error)
}

// Path templates of the EMCO dcm and GAC APIs.
const (
	pLCs  = pProject + "/logical-clouds"
	pLC   = pLCs + "/{logicalCloud}"
	pGKIs = pDIG + "/generic-k8s-intents"
	pGKI  = pGKIs + "/{genericK8sIntent}"
	pGRes = pGKI + "/resources/{genericResource}"
)

var (
	vLC  = []string{"project", "logicalCloud"}
	vGKI = append(append([]string{}, vDIG...), "genericK8sIntent")
	vGRs = append(append([]string{}, vGKI...), "genericResource")
)

func (s *server) emcoRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	for _, reg := range []struct {
		kind *catalog.Kind
		path string
	}{{catalog.Controllers, "/v2/controllers"}, {catalog.DTCControllers, "/v2/dtc-controllers"}, {catalog.CLMControllers, "/v2/clm-controllers"}} {
		registerCRUD(r, s, crud[catalog.ControllerSpec]{res: catalog.For[catalog.ControllerSpec](cat, reg.kind),
			collection: reg.path, item: reg.path + "/{controller}", itemVars: []string{"controller"}, validate: validateController})
	}
	s.logicalCloudRoutes(r)
	s.gacRoutes(r)
}

// validateController follows EMCO's controller schema; the host is only
// recorded (Argus's controllers run in-process), never dialled.
func validateController(o *catalog.Object[catalog.ControllerSpec]) error {
	sp := o.Spec
	switch {
	case sp.Type != "" && sp.Type != catalog.ControllerTypeAction && sp.Type != catalog.ControllerTypePlacement:
		return errdefs.Invalid("spec.type %q is not one of action, placement", sp.Type)
	case sp.Priority < 0 || sp.Priority > 1000000:
		return errdefs.Invalid("spec.priority %d is out of range 0..1000000", sp.Priority)
	case sp.Port < 0 || sp.Port > 65535:
		return errdefs.Invalid("spec.port %d is not a port", sp.Port)
	case len(sp.Host) > 128:
		return errdefs.Invalid("spec.host is longer than 128 characters")
	}
	return nil
}

func (s *server) logicalCloudRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	clouds := s.opts.Clouds
	guard := func(ctx context.Context, key catalog.Key) error {
		if clouds == nil {
			return nil
		}
		return clouds.CloudChangeable(ctx, key[:2])
	}
	lc := crud[catalog.LogicalCloudSpec]{res: catalog.For[catalog.LogicalCloudSpec](cat, catalog.LogicalClouds),
		collection: pLCs, item: pLC, parentVars: vProject, itemVars: []string{"logicalCloud"},
		validate: func(o *catalog.Object[catalog.LogicalCloudSpec]) error { return logicalcloud.Validate(&o.Spec) }}
	if clouds != nil {
		lc.beforeWrite = func(ctx context.Context, key catalog.Key, o *catalog.Object[catalog.LogicalCloudSpec]) error {
			return clouds.CloudSpecChangeable(ctx, key, o.Spec)
		}
		lc.beforeDelete, lc.afterDelete = clouds.CloudDeletable, clouds.CloudDeleted
	}
	registerCRUD(r, s, lc)
	registerCRUD(r, s, crud[catalog.ClusterReferenceSpec]{res: catalog.For[catalog.ClusterReferenceSpec](cat, catalog.ClusterReferences),
		collection: pLC + "/cluster-references", item: pLC + "/cluster-references/{clusterReference}", parentVars: vLC,
		itemVars: []string{"clusterReference"}, noPut: true,
		validate: func(o *catalog.Object[catalog.ClusterReferenceSpec]) error {
			o.Spec.Certificate, o.Spec.CertificateError = "", "" // issued by the cluster, never given
			if err := catalog.ValidateName("cluster provider", o.Spec.ClusterProvider); err != nil {
				return err
			}
			return catalog.ValidateName("cluster", o.Spec.Cluster)
		},
		beforeWrite: func(ctx context.Context, key catalog.Key, o *catalog.Object[catalog.ClusterReferenceSpec]) error {
			_, err := catalog.For[catalog.Empty](cat, catalog.Clusters).Get(ctx, catalog.Key{o.Spec.ClusterProvider, o.Spec.Cluster})
			if errors.Is(err, errdefs.ErrNotFound) {
				return errdefs.Invalid("cluster reference %q names cluster %s+%s, which is not found", o.Metadata.Name, o.Spec.ClusterProvider, o.Spec.Cluster)
			}
			if err != nil {
				return err
			}
			return guard(ctx, key)
		},
		beforeDelete: guard})
	registerCRUD(r, s, crud[catalog.UserPermissionSpec]{res: catalog.For[catalog.UserPermissionSpec](cat, catalog.UserPermissions),
		collection: pLC + "/user-permissions", item: pLC + "/user-permissions/{userPermission}", parentVars: vLC,
		itemVars: []string{"userPermission"}, noPut: true, validate: validatePermission,
		beforeWrite: func(ctx context.Context, key catalog.Key, _ *catalog.Object[catalog.UserPermissionSpec]) error {
			return guard(ctx, key)
		},
		beforeDelete: guard})
	registerCRUD(r, s, crud[catalog.ClusterQuotaSpec]{res: catalog.For[catalog.ClusterQuotaSpec](cat, catalog.ClusterQuotas),
		collection: pLC + "/cluster-quotas", item: pLC + "/cluster-quotas/{clusterQuota}", parentVars: vLC,
		itemVars: []string{"clusterQuota"}, noPut: true, validate: validateQuota,
		beforeWrite: func(ctx context.Context, key catalog.Key, _ *catalog.Object[catalog.ClusterQuotaSpec]) error {
			return guard(ctx, key)
		},
		beforeDelete: guard})
	if clouds == nil {
		return
	}
	for _, a := range []string{"instantiate", "terminate", "update", "stop"} {
		r.HandleFunc(pLC+"/"+a, s.handle(s.cloudAction(a))).Methods(http.MethodPost)
	}
	r.HandleFunc(pLC+"/cluster-references/{clusterReference}/kubeconfig", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		// The kubeconfig holds the cloud user's key: whoever has it writes
		// to the cloud's namespaces, so a read-only token may not read it.
		if err := needsWrite(r, "a logical cloud's kubeconfig (a credential that writes to its clusters)"); err != nil {
			return err
		}
		v := mux.Vars(r)
		kc, err := s.opts.Clouds.Kubeconfig(r.Context(), v["project"], v["logicalCloud"], v["clusterReference"])
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(kc)
		return nil
	})).Methods(http.MethodGet)
}

// cloudAction runs a logical cloud action; the body is ignored.
func (s *server) cloudAction(action string) handlerFunc {
	return func(s *server, w http.ResponseWriter, r *http.Request) error {
		key := varsKey(r, vLC)
		var err error
		switch action {
		case "instantiate":
			_, err = s.opts.Clouds.InstantiateCloud(r.Context(), key)
		case "terminate":
			err = s.opts.Clouds.TerminateCloud(r.Context(), key)
		case "update":
			err = s.opts.Clouds.UpdateCloud(r.Context(), key)
		case "stop":
			err = s.opts.Clouds.StopCloud(r.Context(), key)
		}
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
}

func validatePermission(o *catalog.Object[catalog.UserPermissionSpec]) error {
	sp := o.Spec
	if sp.Namespace != "" {
		if errs := validation.IsDNS1123Label(sp.Namespace); len(errs) > 0 {
			return errdefs.Invalid("spec.namespace %q: %s", sp.Namespace, strings.Join(errs, "; "))
		}
	}
	if len(sp.Resources) == 0 || len(sp.Verbs) == 0 {
		return errdefs.Invalid("a user permission needs spec.resources and spec.verbs")
	}
	return nil
}

func validateQuota(o *catalog.Object[catalog.ClusterQuotaSpec]) error {
	if errs := validation.IsDNS1123Subdomain(o.Metadata.Name); len(errs) > 0 {
		return errdefs.Invalid("cluster quota name %q becomes a ResourceQuota's: %s", o.Metadata.Name, strings.Join(errs, "; "))
	}
	if len(o.Spec) == 0 {
		return errdefs.Invalid("a cluster quota needs at least one limit in spec")
	}
	for k, v := range o.Spec {
		if errs := validation.IsQualifiedName(strings.ReplaceAll(k, "/", "-")); len(errs) > 0 {
			return errdefs.Invalid("quota %q: %s", k, strings.Join(errs, "; "))
		}
		if _, err := resource.ParseQuantity(v); err != nil {
			return errdefs.InvalidWrap(err, "quota %q value %q", k, v)
		}
	}
	return nil
}

func (s *server) gacRoutes(r *mux.Router) {
	cat := s.opts.Catalog
	registerCRUD(r, s, crud[catalog.Empty]{res: catalog.For[catalog.Empty](cat, catalog.GenericK8sIntents),
		collection: pGKIs, item: pGKI, parentVars: vDIG, itemVars: []string{"genericK8sIntent"}})
	registerCRUD(r, s, crud[catalog.GACResourceSpec]{res: catalog.For[catalog.GACResourceSpec](cat, catalog.GACResources),
		collection: pGKI + "/resources", item: pGRes, parentVars: vGKI, itemVars: []string{"genericResource"},
		fileParts: []string{"file"}, files: gacResourceFiles, maxFile: gac.MaxObjectBytes})
	registerCRUD(r, s, crud[catalog.CustomizationSpec]{res: catalog.For[catalog.CustomizationSpec](cat, catalog.GACCustomizations),
		collection: pGRes + "/customizations", item: pGRes + "/customizations/{customization}", parentVars: vGRs,
		itemVars: []string{"customization"}, fileParts: []string{"files", "file"}, files: gacCustomizationFiles, maxFile: gac.MaxObjectBytes})
}

// gacResourceFiles checks a GAC resource and keeps its one optional file:
// a new object other than a ConfigMap or Secret needs it.
func gacResourceFiles(o *catalog.Object[catalog.GACResourceSpec], files []catalog.File) ([]byte, error) {
	sp := o.Spec
	if sp.App == "" {
		return nil, errdefs.Invalid("spec.app is missing")
	}
	if !strings.EqualFold(sp.NewObject, "true") && !strings.EqualFold(sp.NewObject, "false") {
		return nil, errdefs.Invalid("spec.newObject %q is not \"true\" or \"false\"", sp.NewObject)
	}
	g := sp.ResourceGVK
	if g.APIVersion == "" || g.Kind == "" || g.Name == "" {
		return nil, errdefs.Invalid("spec.resourceGVK needs apiVersion, kind and name")
	}
	if len(files) > 1 {
		return nil, errdefs.Invalid("a generic resource takes one file, got %d", len(files))
	}
	if err := gacFilesFit(files); err != nil {
		return nil, err
	}
	kind := strings.ToLower(g.Kind)
	if len(files) == 0 || len(files[0].Content) == 0 {
		if sp.IsNew() && kind != "configmap" && kind != "secret" {
			return nil, errdefs.Invalid("a new %s needs its object in part \"file\"", g.Kind)
		}
		return nil, nil
	}
	return files[0].Content, nil
}

// gacCustomizationFiles checks a customization as EMCO does and keeps its
// files; patch values looked up from URLs are refused.
func gacCustomizationFiles(o *catalog.Object[catalog.CustomizationSpec], files []catalog.File) ([]byte, error) {
	sp := o.Spec
	info := sp.ClusterInfo
	var missing []string
	for field, v := range map[string]string{"spec.clusterSpecific": sp.ClusterSpecific, "spec.clusterInfo.scope": info.Scope,
		"spec.clusterInfo.clusterProvider": info.ClusterProvider, "spec.clusterInfo.mode": info.Mode} {
		if v == "" {
			missing = append(missing, field)
		}
	}
	if len(missing) > 0 {
		return nil, errdefs.Invalid("customization is missing %s", strings.Join(sortStrings(missing), ", "))
	}
	switch strings.ToLower(info.Scope) {
	case "label", "name":
	default:
		return nil, errdefs.Invalid("spec.clusterInfo.scope %q is not one of label, name", info.Scope)
	}
	switch strings.ToLower(info.Mode) {
	case "allow", "deny":
	default:
		return nil, errdefs.Invalid("spec.clusterInfo.mode %q is not one of allow, deny", info.Mode)
	}
	if sp.IsClusterSpecific() && strings.EqualFold(info.Scope, "label") && info.ClusterLabel == "" {
		return nil, errdefs.Invalid("spec.clusterInfo.clusterLabel is missing")
	}
	if sp.IsClusterSpecific() && strings.EqualFold(info.Scope, "name") && info.Cluster == "" {
		return nil, errdefs.Invalid("spec.clusterInfo.cluster is missing")
	}
	if err := gac.ValidatePatch(sp); err != nil {
		return nil, err
	}
	if err := gacFilesFit(files); err != nil {
		return nil, err
	}
	var kept []catalog.File
	for _, f := range files {
		if len(f.Content) > 0 { // EMCO drops empty files too
			kept = append(kept, f)
		}
	}
	return encodeFiles(kept)
}

// gacFilesFit refuses GAC files that could not become a Kubernetes object
// anyway: each new or patched object is copied to every cluster of its
// app, so their size is what bounds the plan's.
func gacFilesFit(files []catalog.File) error {
	total := 0
	for _, f := range files {
		total += len(f.Content)
	}
	if total > gac.MaxObjectBytes {
		return errdefs.TooLarge("the upload's files hold %d bytes, more than the %d a generic resource or customization may have", total, gac.MaxObjectBytes)
	}
	return nil
}
