package deploy

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/render"
)

// V1Provider is the provider name under which a v1 cloud region is a
// cluster. It starts with "_", which no v2 provider name may, so the two
// never clash.
const V1Provider = "_v1"

// MaxAppName keeps "<context id>-<app>" within a 63-character label value.
const MaxAppName = 42

// InstanceGroup is the rsync group of a v1 instance.
func InstanceGroup(id string) string { return catalog.InstanceGroup(id) }

func (s *Service) instances() *catalog.Resource[catalog.InstanceSpec] {
	return catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances)
}

// renderInstance renders a request: the rb definition's chart, the
// profile's values, the request's overrides.
func (s *Service) renderInstance(ctx context.Context, req catalog.InstanceRequest) (release, namespace string, rs []appcontext.Resource, err error) {
	for field, v := range map[string]string{"rb-name": req.RBName, "rb-version": req.RBVersion, "profile-name": req.ProfileName, "cloud-region": req.CloudRegion} {
		if v == "" {
			return "", "", nil, errdefs.Invalid("%s is missing", field)
		}
	}
	cat := s.opts.Catalog
	defKey := catalog.Key{req.RBName, req.RBVersion}
	defs := catalog.For[catalog.RBDefinitionSpec](cat, catalog.RBDefinitions)
	def, err := defs.Get(ctx, defKey)
	if err != nil {
		return "", "", nil, err
	}
	chart, err := defs.GetContent(ctx, defKey)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", "", nil, errdefs.Invalid("rb definition %s/%s has no chart; upload its content first", req.RBName, req.RBVersion)
	}
	if err != nil {
		return "", "", nil, err
	}
	profKey := catalog.Key{req.RBName, req.RBVersion, req.ProfileName}
	profiles := catalog.For[catalog.RBProfileSpec](cat, catalog.RBProfiles)
	prof, err := profiles.Get(ctx, profKey)
	if err != nil {
		return "", "", nil, err
	}
	profileTgz, err := profiles.GetContent(ctx, profKey)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return "", "", nil, err
	}
	if _, err := catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).Get(ctx, catalog.Key{req.CloudRegion}); err != nil {
		return "", "", nil, err
	}
	release = firstOf(req.ReleaseName, prof.Spec.ReleaseName, req.RBName)
	if len(release) > MaxAppName {
		return "", "", nil, errdefs.Invalid("release name %q is longer than %d characters", release, MaxAppName)
	}
	if err := catalog.ValidateName("release", release); err != nil {
		return "", "", nil, err
	}
	namespace = firstOf(prof.Spec.Namespace, Namespace)
	rendered, err := s.opts.Renderer.Render(ctx, render.Options{Chart: chart, ChartName: def.Spec.ChartName, Profile: profileTgz,
		ReleaseName: release, Namespace: namespace, Overrides: req.OverrideValues})
	if err != nil {
		return "", "", nil, err
	}
	rs = toContext(rendered)
	return release, namespace, rs, nil
}

func refsOf(rs []appcontext.Resource) []catalog.ResourceRef {
	out := make([]catalog.ResourceRef, 0, len(rs))
	for _, r := range rs {
		out = append(out, catalog.ResourceRef{GVK: catalog.GVK{Group: r.GVK.Group, Version: r.GVK.Version, Kind: r.GVK.Kind}, Name: r.Name})
	}
	return out
}

// CreateInstance renders the request, records a single-app, single-cluster
// context and starts rsync on it. It returns as soon as the context exists.
func (s *Service) CreateInstance(ctx context.Context, req catalog.InstanceRequest) (catalog.InstanceSpec, error) {
	release, ns, resources, err := s.renderInstance(ctx, req)
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	id := appcontext.NewID()
	spec := catalog.InstanceSpec{ID: id, Request: req, Namespace: ns, ReleaseName: release, Resources: refsOf(resources)}
	if err := s.instances().Create(ctx, catalog.Key{id}, catalog.Object[catalog.InstanceSpec]{Metadata: catalog.Metadata{Name: id}, Spec: spec}); err != nil {
		return spec, err
	}
	meta := appcontext.Meta{ID: id, Kind: "instance", Group: InstanceGroup(id), Namespace: ns, StatusID: id, Created: s.opts.Now()}
	placement := &appcontext.Placement{App: release, Cluster: appcontext.ClusterRef{Provider: V1Provider, Name: req.CloudRegion}, Resources: resources}
	if err := s.opts.Contexts.Create(ctx, meta, appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()}, []*appcontext.Placement{placement}); err != nil {
		_ = s.instances().Delete(context.WithoutCancel(ctx), catalog.Key{id}) // no instance without its context
		return spec, fmt.Errorf("record context: %w", err)
	}
	s.opts.Rsync.Instantiate(meta.Group, id)
	// A delete that marked the instance before this check may have asked
	// rsync to terminate a context that did not exist yet: terminate it here
	// (after the instantiate, as actions on a group are serialised), so no
	// resource outlives its instance.
	if err := s.instances().Alive(context.WithoutCancel(ctx), catalog.Key{id}); err != nil {
		s.opts.Rsync.Terminate(meta.Group, id)
		return spec, errdefs.Conflict("instance %s was deleted while it was being created", id)
	}
	s.log.WithFields(logrus.Fields{"instance": id, "release": release, "region": req.CloudRegion}).Info("instance created")
	return spec, nil
}

// UpgradeInstance re-renders an instance with a new request and applies the
// difference in place, under the same context and labels.
func (s *Service) UpgradeInstance(ctx context.Context, id string, req catalog.InstanceRequest) (catalog.InstanceSpec, error) {
	cur, err := s.instances().Get(ctx, catalog.Key{id})
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	if req.CloudRegion != "" && req.CloudRegion != cur.Spec.Request.CloudRegion {
		return cur.Spec, errdefs.Invalid("an upgrade cannot move an instance to another cloud region")
	}
	if req.CloudRegion == "" {
		req.CloudRegion = cur.Spec.Request.CloudRegion
	}
	if s.opts.Rsync.Busy(InstanceGroup(id)) {
		return cur.Spec, errdefs.Conflict("instance %s is still being deployed; try again when it is done", id)
	}
	release, ns, resources, err := s.renderInstance(ctx, req)
	if err != nil {
		return cur.Spec, err
	}
	if release != cur.Spec.ReleaseName || ns != cur.Spec.Namespace {
		return cur.Spec, errdefs.Invalid("an upgrade cannot change the release name or namespace")
	}
	old, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return cur.Spec, err
	}
	fresh := []*appcontext.Placement{{App: release, Cluster: appcontext.ClusterRef{Provider: V1Provider, Name: req.CloudRegion}, Resources: resources}}
	for _, p := range mergeForUpdate(old, fresh) {
		if err := s.opts.Contexts.ReplacePlacement(ctx, id, p); err != nil {
			return cur.Spec, err
		}
	}
	spec := cur.Spec
	spec.Request, spec.Resources = req, refsOf(resources)
	if _, err := s.instances().Put(ctx, catalog.Key{id}, catalog.Object[catalog.InstanceSpec]{Metadata: cur.Metadata, Spec: spec}); err != nil {
		return spec, err
	}
	if err := s.opts.Contexts.SetStatus(ctx, id, appcontext.Status{Status: appcontext.Updating}); err != nil {
		return spec, err
	}
	s.opts.Rsync.Update(InstanceGroup(id), id)
	return spec, nil
}

// DeleteInstance starts deleting an instance's resources and removes the
// instance; its context stays for history. The instance is marked first,
// so a create still in flight sees the delete and terminates its own
// context (CreateInstance).
func (s *Service) DeleteInstance(ctx context.Context, id string) error {
	return s.instances().Delete(ctx, catalog.Key{id}, func(context.Context) error {
		s.opts.Rsync.Terminate(InstanceGroup(id), id)
		return nil
	})
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
