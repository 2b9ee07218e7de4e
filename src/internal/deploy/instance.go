package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/rsync"
)

// V1Provider is the provider name under which a v1 cloud region is a
// cluster.
const V1Provider = appcontext.V1Provider

// MaxAppName keeps "<context id>-<app>" within a 63-character label value.
const MaxAppName = 42

// InstanceIDValue is the value k8splugin passes to every chart it renders
// for an instance: the instance's id.
const InstanceIDValue = "k8s-rb-instance-id"

// InstanceGroup is the rsync group of a v1 instance.
func InstanceGroup(id string) string { return catalog.InstanceGroup(id) }

func (s *Service) instances() *catalog.Resource[catalog.InstanceSpec] {
	return catalog.For[catalog.InstanceSpec](s.opts.Catalog, catalog.Instances)
}

func (s *Service) configs() *catalog.Resource[catalog.InstanceConfigSpec] {
	return catalog.For[catalog.InstanceConfigSpec](s.opts.Catalog, catalog.InstanceConfigs)
}

// v1Inputs is what every render of one instance shares.
type v1Inputs struct {
	defKey    catalog.Key
	chartName string // picks the chart of an archive holding several
	chart     []byte
	profile   []byte
	release   string
	namespace string
	overrides map[string]string
}

// instanceInputs reads the definition, profile and region a request names
// and resolves the release name and namespace. release, when set, is the
// instance's (an upgrade keeps it).
func (s *Service) instanceInputs(ctx context.Context, id string, req catalog.InstanceRequest, release string) (v1Inputs, error) {
	for _, f := range []struct{ field, v string }{{"rb-name", req.RBName}, {"rb-version", req.RBVersion},
		{"profile-name", req.ProfileName}, {"cloud-region", req.CloudRegion}} {
		if f.v == "" {
			return v1Inputs{}, errdefs.Invalid("%s is missing", f.field)
		}
	}
	if !appcontext.ValidFieldValidation(req.FieldValidation) {
		return v1Inputs{}, errdefs.Invalid("field-validation %q is not one of Strict, Warn, Ignore", req.FieldValidation)
	}
	cat := s.opts.Catalog
	in := v1Inputs{defKey: catalog.Key{req.RBName, req.RBVersion}}
	defs := catalog.For[catalog.RBDefinitionSpec](cat, catalog.RBDefinitions)
	def, err := defs.Get(ctx, in.defKey)
	if err != nil {
		return in, err
	}
	in.chartName = def.Spec.ChartName
	chart, err := defs.GetContent(ctx, in.defKey)
	if errors.Is(err, errdefs.ErrNotFound) {
		return in, errdefs.Invalid("rb definition %s/%s has no chart; upload its content first", req.RBName, req.RBVersion)
	}
	if err != nil {
		return in, err
	}
	in.chart = chart
	profKey := catalog.Key{req.RBName, req.RBVersion, req.ProfileName}
	profiles := catalog.For[catalog.RBProfileSpec](cat, catalog.RBProfiles)
	prof, err := profiles.Get(ctx, profKey)
	if err != nil {
		return in, err
	}
	if in.profile, err = profiles.GetContent(ctx, profKey); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return in, err
	}
	if _, err := catalog.For[catalog.ConnectivitySpec](cat, catalog.ConnectivityInfos).Get(ctx, catalog.Key{req.CloudRegion}); err != nil {
		return in, err
	}
	in.release = firstOf(release, req.ReleaseName, prof.Spec.ReleaseName, req.RBName)
	if err := validRelease(in.release, release == ""); err != nil {
		return in, err
	}
	in.namespace = firstOf(prof.Spec.Namespace, Namespace)
	// k8splugin hands every chart the instance id as a value.
	in.overrides = map[string]string{InstanceIDValue: id}
	for k, v := range req.OverrideValues {
		in.overrides[k] = v
	}
	return in, nil
}

// validRelease checks a release name. A new instance's must be a DNS-1123
// label, as k8splugin checks before it renders: the name goes into object
// names and labels, where anything else fails on the cluster half-way
// through. An existing instance keeps the name it has.
func validRelease(name string, fresh bool) error {
	if len(name) > MaxAppName {
		return errdefs.Invalid("release name %q is longer than %d characters", name, MaxAppName)
	}
	if !fresh {
		return catalog.ValidateName("release", name)
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return errdefs.Invalid("release name %q is not a valid DNS label: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// renderInstance renders an instance: the definition's chart with the
// profile's values and the overrides, then every active config's template
// with the config's values on top. A config's resource replaces the
// chart's resource of the same kind, namespace and name, as k8splugin
// updates an object a config renders again. Every object carries
// k8splugin's instance label.
func (s *Service) renderInstance(ctx context.Context, id string, in v1Inputs, configs []catalog.Object[catalog.InstanceConfigSpec]) ([]appcontext.Resource, error) {
	rendered, err := s.opts.Renderer.Render(ctx, render.Options{Chart: in.chart, ChartName: in.chartName, Profile: in.profile,
		ReleaseName: in.release, Namespace: in.namespace, Overrides: in.overrides})
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, r := range rendered {
		index[r.Key()] = i
	}
	for _, c := range configs {
		if !c.Spec.Active() {
			continue
		}
		content := c.Spec.History[len(c.Spec.History)-1].Content
		chart, err := s.templateChart(ctx, in, content.TemplateName)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", content.ConfigName, err)
		}
		more, err := s.opts.Renderer.Render(ctx, render.Options{Chart: chart, Profile: in.profile, ReleaseName: in.release,
			Namespace: in.namespace, Overrides: in.overrides, Values: content.Values})
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", content.ConfigName, err)
		}
		for _, r := range more {
			if i, ok := index[r.Key()]; ok {
				rendered[i] = r
				continue
			}
			index[r.Key()] = len(rendered)
			rendered = append(rendered, r)
		}
	}
	rs := make([]appcontext.Resource, 0, len(rendered))
	for _, r := range rendered {
		rsync.DecorateInstance(r.Object, id)
		manifest, err := json.Marshal(r.Object.Object)
		if err != nil {
			return nil, err
		}
		rs = append(rs, appcontext.Resource{GVK: r.GVK, Name: r.Name, Namespace: r.Namespace, Manifest: manifest, Hook: hookOf(r.Hook)})
	}
	return rs, nil
}

// templateChart is the chart a config template renders: its own upload,
// or the definition's chart when it has none (as k8splugin does).
func (s *Service) templateChart(ctx context.Context, in v1Inputs, template string) ([]byte, error) {
	templates := catalog.For[catalog.ConfigTemplateSpec](s.opts.Catalog, catalog.ConfigTemplates)
	key := append(append(catalog.Key{}, in.defKey...), template)
	t, err := templates.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if !t.Spec.HasContent {
		return in.chart, nil
	}
	return templates.GetContent(ctx, key)
}

// refsOf lists an instance's resources as k8splugin does: without its
// hooks.
func refsOf(rs []appcontext.Resource) []catalog.ResourceRef {
	out := make([]catalog.ResourceRef, 0, len(rs))
	for _, r := range rs {
		if r.Hook != nil {
			continue
		}
		out = append(out, catalog.ResourceRef{GVK: catalog.GVK{Group: r.GVK.Group, Version: r.GVK.Version, Kind: r.GVK.Kind}, Name: r.Name})
	}
	return out
}

// CreateInstance renders the request, records a single-app, single-cluster
// context and starts rsync on it. Like k8splugin, it answers once the
// resources are created: it waits (up to CreateWait) for rsync's first
// pass, and when that left any resource Failed it deletes the instance
// and what was applied and answers ErrFailed with the reasons. A first
// pass that takes longer, or CreateAsync, answers at once; the instance's
// status shows how applying goes.
func (s *Service) CreateInstance(ctx context.Context, req catalog.InstanceRequest) (catalog.InstanceSpec, error) {
	id := appcontext.NewID()
	in, err := s.instanceInputs(ctx, id, req, "")
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	resources, err := s.renderInstance(ctx, id, in, nil)
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	spec := catalog.InstanceSpec{ID: id, Request: req, Namespace: in.namespace, ReleaseName: in.release, Resources: refsOf(resources)}
	if err := s.instances().Create(ctx, catalog.Key{id}, catalog.Object[catalog.InstanceSpec]{Metadata: catalog.Metadata{Name: id}, Spec: spec}); err != nil {
		return spec, err
	}
	meta := appcontext.Meta{ID: id, Kind: "instance", Group: InstanceGroup(id), Namespace: in.namespace, StatusID: id, Created: s.opts.Now(),
		FieldValidation: req.FieldValidation, SyncPolicy: instancePolicy(req)}
	placement := &appcontext.Placement{App: in.release, Cluster: appcontext.ClusterRef{Provider: V1Provider, Name: req.CloudRegion}, Resources: resources}
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
	log := s.log.WithFields(logrus.Fields{"instance": id, "release": in.release, "region": req.CloudRegion})
	log.Info("instance created")
	if s.opts.CreateAsync {
		return spec, nil
	}
	if err := s.firstApply(ctx, id); err != nil {
		log.WithError(err).Info("instance reverted: its first apply failed")
		return catalog.InstanceSpec{}, err
	}
	return spec, nil
}

// firstApply waits, up to CreateWait, for rsync's first pass over a new
// instance. When that left a resource Failed — whatever the cause: an API
// server's refusal, an object another deployment owns — the instance is
// deleted with what it applied (waiting up to DeleteWait; revert) and the
// answer is ErrFailed naming the resources, as k8splugin reverts a create
// whose resources fail. A first pass still at work after CreateWait is no
// error: the instance stays and its status shows the rest.
func (s *Service) firstApply(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, s.opts.CreateWait)
	err := s.opts.Rsync.Idle(wctx, InstanceGroup(id))
	cancel()
	if err != nil {
		return nil // applying goes on after the wait
	}
	c, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return nil
	}
	failed := failedResources(c)
	if len(failed) == 0 {
		return nil
	}
	if err := s.revert(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("revert instance %s after its apply failed (%s): %w", id, strings.Join(failed, "; "), err)
	}
	return errdefs.Failed("Create Kubernetes Resources: %s; the instance was reverted", strings.Join(failed, "; "))
}

// revert deletes a new instance whose first apply failed, and of its
// resources only those it applied: rsync is stopped first, and what it
// never applied (refused, waiting, not tried) is marked Deleted, so the
// deletion cannot touch an object of the same name that is not the
// instance's (one the create failed on because another deployment has it).
func (s *Service) revert(ctx context.Context, id string) error {
	s.opts.Rsync.Stop(InstanceGroup(id))
	c, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return err
	}
	var never []appcontext.StatusUpdate
	for _, p := range c.Placements {
		for _, r := range p.Resources {
			switch p.StatusOf(r.Key()).Status {
			case appcontext.RsyncFailed, appcontext.RsyncPending, appcontext.RsyncWaiting:
				never = append(never, appcontext.StatusUpdate{App: p.App, Cluster: p.Cluster, Key: r.Key(),
					Status: appcontext.ResourceStatus{Status: appcontext.RsyncDeleted, Error: "never applied: the create was reverted"}})
			}
		}
	}
	if err := s.opts.Contexts.SetResourceStatuses(ctx, id, never, nil); err != nil {
		return err
	}
	return s.DeleteInstance(ctx, id)
}

// maxFailedNamed bounds the resources a failed create's answer names.
const maxFailedNamed = 5

// failedResources names the Failed resources of a context, with reasons.
func failedResources(c *appcontext.Context) []string {
	var out []string
	n := 0
	for _, p := range c.Placements {
		for _, r := range p.Resources {
			st := p.StatusOf(r.Key())
			if st.Status != appcontext.RsyncFailed {
				continue
			}
			if n++; n <= maxFailedNamed {
				out = append(out, fmt.Sprintf("%s %s: %s", r.GVK.Kind, r.Name, st.Error))
			}
		}
	}
	if n > maxFailedNamed {
		out = append(out, fmt.Sprintf("and %d more", n-maxFailedNamed))
	}
	return out
}

// UpgradeInstance re-renders an instance with a new request (k8splugin's
// upgrade body: no release name, which stays the instance's) and applies
// the difference in place, under the same context and labels. As in
// k8splugin, the instance's configs are dropped, their resources with them.
func (s *Service) UpgradeInstance(ctx context.Context, id string, req catalog.InstanceRequest) (catalog.InstanceSpec, error) {
	unlock, err := s.lockInstance(ctx, id)
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	defer unlock()
	cur, err := s.instances().Get(ctx, catalog.Key{id})
	if err != nil {
		return catalog.InstanceSpec{}, err
	}
	if req.CloudRegion == "" {
		req.CloudRegion = cur.Spec.Request.CloudRegion
	}
	if req.CloudRegion != cur.Spec.Request.CloudRegion {
		return cur.Spec, errdefs.Invalid("an upgrade cannot move an instance to another cloud region; create one there and delete this one")
	}
	req.ReleaseName = cur.Spec.ReleaseName
	configs, err := s.configs().List(ctx, catalog.Key{id})
	if err != nil {
		return cur.Spec, err
	}
	if err := s.waitIdle(ctx, id); err != nil {
		return cur.Spec, err
	}
	same := cur.Spec.Request
	same.ReleaseName = req.ReleaseName // an instance created without one has it all the same
	if len(configs) == 0 && reflect.DeepEqual(req, same) {
		if c, err := s.opts.Contexts.Get(ctx, id); err == nil && (c.Status.Status == appcontext.Instantiated || c.Status.Status == appcontext.Updated) {
			return cur.Spec, nil // nothing to do, as k8splugin says
		}
	}
	spec, err := s.reapply(ctx, cur, req, nil)
	if err != nil {
		return spec, err
	}
	for _, c := range configs {
		if err := s.configs().Delete(ctx, catalog.Key{id, c.Metadata.Name}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return spec, err
		}
	}
	return spec, nil
}

// reapply renders the instance with req and configs and starts an rsync
// update of the difference. The caller holds the instance's lock and has
// waited for rsync to be idle on it.
func (s *Service) reapply(ctx context.Context, cur catalog.Object[catalog.InstanceSpec], req catalog.InstanceRequest, configs []catalog.Object[catalog.InstanceConfigSpec]) (catalog.InstanceSpec, error) {
	id := cur.Spec.ID
	in, err := s.instanceInputs(ctx, id, req, cur.Spec.ReleaseName)
	if err != nil {
		return cur.Spec, err
	}
	if in.namespace != cur.Spec.Namespace {
		return cur.Spec, errdefs.Invalid("profile %s deploys to namespace %s, the instance is in %s: an upgrade cannot change the namespace",
			req.ProfileName, in.namespace, cur.Spec.Namespace)
	}
	resources, err := s.renderInstance(ctx, id, in, configs)
	if err != nil {
		return cur.Spec, err
	}
	old, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return cur.Spec, err
	}
	spec := cur.Spec
	spec.Request, spec.Resources = req, refsOf(resources)
	if _, err := s.instances().Put(ctx, catalog.Key{id}, catalog.Object[catalog.InstanceSpec]{Metadata: cur.Metadata, Spec: spec}); err != nil {
		return spec, err
	}
	var meta *appcontext.Meta
	if old.Meta.FieldValidation != req.FieldValidation || old.Meta.SyncPolicy != instancePolicy(req) {
		m := old.Meta
		m.FieldValidation, m.SyncPolicy = req.FieldValidation, instancePolicy(req)
		meta = &m
	}
	fresh := []*appcontext.Placement{{App: in.release, Cluster: appcontext.ClusterRef{Provider: V1Provider, Name: req.CloudRegion}, Resources: resources}}
	return spec, s.applyUpdate(ctx, InstanceGroup(id), id, fresh, meta)
}

// waitIdle waits, up to BusyWait, for rsync to finish what it does on the
// instance: its context must not change under a running apply.
func (s *Service) waitIdle(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, s.opts.BusyWait)
	defer cancel()
	if err := s.opts.Rsync.Idle(wctx, InstanceGroup(id)); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errdefs.Conflict("instance %s is still being deployed after %s; try again when it is done", id, s.opts.BusyWait)
	}
	return nil
}

// DeleteInstance deletes an instance's resources and the instance (its
// configs and subscriptions go with it); its context stays for history.
// Like k8splugin, which deletes the resources before it answers, it waits
// for rsync to finish, up to DeleteWait; deletion goes on after that.
func (s *Service) DeleteInstance(ctx context.Context, id string) error {
	unlock, err := s.lockInstance(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	// The instance is marked first, so a create still in flight sees the
	// delete and terminates its own context (CreateInstance).
	if err := s.instances().Delete(ctx, catalog.Key{id}, func(context.Context) error {
		s.opts.Rsync.Terminate(InstanceGroup(id), id)
		return nil
	}); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, s.opts.DeleteWait)
	defer cancel()
	if err := s.opts.Rsync.Idle(wctx, InstanceGroup(id)); err != nil {
		s.log.WithField("instance", id).Info("instance deletion continues in the background")
	}
	return nil
}

// FullInstance is GET /v1/instance/{id}?full=true, k8splugin's stored
// instance: the instance with its status and hook data. Argus applies no
// hooks, so those fields hold k8splugin's defaults.
type FullInstance struct {
	catalog.InstanceSpec
	Status             string `json:"status"`
	Hooks              []any  `json:"hooks"`
	HookProgress       string `json:"hook-progress"`
	PreInstallTimeout  int64  `json:"PreInstallTimeout"`
	PostInstallTimeout int64  `json:"PostInstallTimeout"`
	PreDeleteTimeout   int64  `json:"PreDeleteTimeout"`
	PostDeleteTimeout  int64  `json:"PostDeleteTimeout"`
	PreUpgradeTimeout  int64  `json:"PreUpgradeTimeout"`
	PostUpgradeTimeout int64  `json:"PostUpgradeTimeout"`
}

// V1Status is k8splugin's name for a context status; the failed ones follow
// k8splugin's "<step>-FAILED" pattern.
func V1Status(contextStatus string) string {
	switch contextStatus {
	case appcontext.Instantiating:
		return "CREATING"
	case appcontext.Instantiated, appcontext.Updated:
		return "DONE"
	case appcontext.InstantiateFailed:
		return "CREATE-FAILED"
	case appcontext.Updating:
		return "UPGRADING"
	case appcontext.UpdateFailed:
		return "UPGRADE-FAILED"
	case appcontext.Terminating:
		return "DELETING"
	case appcontext.Terminated:
		return "DELETED"
	case appcontext.TerminateFailed:
		return "DELETE-FAILED"
	}
	return contextStatus
}

// GetFullInstance answers GET /v1/instance/{id}?full=true.
func (s *Service) GetFullInstance(ctx context.Context, id string) (FullInstance, error) {
	inst, err := s.instances().Get(ctx, catalog.Key{id})
	if err != nil {
		return FullInstance{}, err
	}
	out := FullInstance{InstanceSpec: inst.Spec, Hooks: []any{}, PreInstallTimeout: 60, PostInstallTimeout: 600,
		PreDeleteTimeout: 60, PostDeleteTimeout: 600, PreUpgradeTimeout: 60, PostUpgradeTimeout: 600}
	c, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return out, err
	}
	out.Status = V1Status(c.Status.Status)
	return out, nil
}

// lockInstance serialises the changes to one instance or DIG (upgrade,
// configs, delete; update, rollback, migrate), which read, render and
// write it back: in this process, then, with Options.Locks, across the
// replicas (a request may reach any of them).
func (s *Service) lockInstance(ctx context.Context, id string) (func(), error) {
	s.mu.Lock()
	l := s.locks[id]
	if l == nil {
		l = &instanceLock{}
		s.locks[id] = l
	}
	l.users++
	s.mu.Unlock()
	l.Lock()
	local := func() {
		l.Unlock()
		s.mu.Lock()
		if l.users--; l.users == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
	if s.opts.Locks == nil {
		return local, nil
	}
	shared, err := s.opts.Locks.Lock(ctx, id)
	if err != nil {
		local()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errdefs.Unavailable(err, "cannot serialise the change with the other replicas")
	}
	return func() { shared(); local() }, nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// sortedConfigs orders an instance's configs by name, the order their
// resources are layered in.
func sortedConfigs(list []catalog.Object[catalog.InstanceConfigSpec]) []catalog.Object[catalog.InstanceConfigSpec] {
	sort.Slice(list, func(i, j int) bool { return list[i].Metadata.Name < list[j].Metadata.Name })
	return list
}
