package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/placement"
	"github.com/argus-mc/argus/src/internal/render"
)

// Rsync is the part of the rsync engine the lifecycle drives.
type Rsync interface {
	Instantiate(group, id string)
	Update(group, id string)
	Terminate(group, id string)
	Stop(group string) bool
	Busy(group string) bool
	// Idle waits until no action runs on the group, or ctx ends.
	Idle(ctx context.Context, group string) error
	// Sync re-applies the context's sync request; refused (Conflict)
	// while another action on it is requested or at work.
	Sync(ctx context.Context, group, id string) error
}

// Renderer renders one app's chart with its profile and overrides.
type Renderer interface {
	Render(ctx context.Context, opts render.Options) ([]render.Resource, error)
}

var (
	_ Renderer = (*render.Pool)(nil)
	_ Renderer = render.InProcess{}
)

// Options configures a Service; Catalog, Contexts and Rsync are required.
type Options struct {
	Catalog  *catalog.Catalog
	Contexts *appcontext.Store
	Rsync    Rsync
	// Renderer renders charts; nil renders in this process (render.InProcess),
	// unbounded in time and memory: the orchestrator passes a render.Pool.
	Renderer Renderer
	Logger   *logrus.Entry
	Now      func() time.Time
	// BusyWait bounds how long a v1 upgrade or config change waits for
	// rsync to finish with the instance before it is refused; 0 means 30s.
	BusyWait time.Duration
	// CreateWait bounds how long a v1 instance create waits for the first
	// apply to finish before it answers (k8splugin answers once the
	// resources are created); 0 means 60s. A create whose first apply left
	// a resource Failed is reverted and answered with the reasons.
	CreateWait time.Duration
	// CreateAsync answers a v1 instance create as soon as the context
	// exists, without waiting for rsync (and so without reverting).
	CreateAsync bool
	// DeleteWait bounds how long a v1 instance delete waits for the
	// resources to be deleted before it answers; 0 means 30s.
	DeleteWait time.Duration
	// RevisionLimit is how many revisions each DIG's context keeps for
	// rollback; 0 means appcontext.DefaultRevisionLimit.
	RevisionLimit int
	// Locks, when set, serialises the changes to one DIG or v1 instance
	// across every process sharing the stores (ownership.Set), as the
	// process-local lock does within this one; nil: this process is alone.
	Locks Locker
	// Drift finds what a sync re-applies; nil leaves sync unavailable.
	Drift DriftFinder
}

// Locker takes a lock shared with the other replicas and returns its
// release.
type Locker interface {
	Lock(ctx context.Context, name string) (func(), error)
}

// Service runs DIG lifecycle actions and v1 instance actions.
type Service struct {
	opts Options
	log  *logrus.Entry

	mu    sync.Mutex
	locks map[string]*instanceLock // by v1 instance id, while in use
}

type instanceLock struct {
	sync.Mutex
	users int
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Catalog == nil || opts.Contexts == nil || opts.Rsync == nil {
		return nil, errors.New("deploy: Catalog, Contexts and Rsync are required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Now().UTC() }
	}
	if opts.Renderer == nil {
		opts.Renderer = render.InProcess{}
	}
	if opts.BusyWait == 0 {
		opts.BusyWait = 30 * time.Second
	}
	if opts.DeleteWait == 0 {
		opts.DeleteWait = 30 * time.Second
	}
	if opts.CreateWait == 0 {
		opts.CreateWait = DefaultCreateWait
	}
	return &Service{opts: opts, log: opts.Logger, locks: map[string]*instanceLock{}}, nil
}

// DefaultCreateWait bounds a v1 create's wait for its first apply.
const DefaultCreateWait = 60 * time.Second

// Namespace is where DIG resources without a namespace go.
const Namespace = "default"

// Group is the rsync group of a DIG: actions on it are serialised.
func Group(dig catalog.Key) string { return catalog.DIGGroup(dig) }

func (s *Service) digExists(ctx context.Context, dig catalog.Key) (catalog.Object[catalog.DIGSpec], error) {
	return catalog.For[catalog.DIGSpec](s.opts.Catalog, catalog.DeploymentIntentGroups).Get(ctx, dig)
}

func (s *Service) action(state, contextID string) catalog.StateAction {
	return catalog.StateAction{State: state, ContextID: contextID, TimeStamp: s.opts.Now()}
}

// Approve marks a created DIG ready to instantiate.
func (s *Service) Approve(ctx context.Context, dig catalog.Key) error {
	if _, err := s.digExists(ctx, dig); err != nil {
		return err
	}
	if _, err := s.digIntents(ctx, dig); err != nil {
		return err
	}
	// A dependency cycle would leave apps waiting for ever: refused here,
	// and again by every instantiate and update (dependencies may change).
	apps, err := catalog.For[catalog.Empty](s.opts.Catalog, catalog.Apps).List(ctx, dig[:3])
	if err != nil {
		return err
	}
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, a.Metadata.Name)
	}
	if _, err := s.dependencies(ctx, dig[:3], names); err != nil {
		return err
	}
	if _, err := s.opts.Catalog.TransitionDIG(ctx, dig, []string{catalog.StateCreated, catalog.StateApproved}, s.action(catalog.StateApproved, ""), ""); err != nil {
		return err
	}
	// A DIG deleted between the check above and the transition would leave
	// a lifecycle behind, which a DIG created again under its name would
	// inherit.
	if _, err := s.digExists(ctx, dig); errors.Is(err, errdefs.ErrNotFound) {
		return errors.Join(err, s.opts.Catalog.DeleteDIGState(context.WithoutCancel(ctx), dig))
	}
	return nil
}

// Instantiate renders and places every app, records a new context and
// starts rsync on it. It returns the context id; the work goes on after.
func (s *Service) Instantiate(ctx context.Context, dig catalog.Key) (string, error) {
	obj, err := s.digExists(ctx, dig)
	if err != nil {
		return "", err
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return "", err
	}
	from := []string{catalog.StateApproved, catalog.StateTerminated}
	if !slices.Contains(from, state.Current) {
		return "", errdefs.Conflict("the deployment intent group is %s; instantiate needs it to be Approved or Terminated", state.Current)
	}
	if !appcontext.ValidFieldValidation(obj.Spec.FieldValidation) {
		return "", errdefs.Invalid("spec.fieldValidation %q is not one of Strict, Warn, Ignore", obj.Spec.FieldValidation)
	}
	start := time.Now()
	pl, err := s.plan(ctx, dig, obj.Spec)
	if err != nil {
		return "", err
	}
	placements := pl.placements
	planMS := time.Since(start).Milliseconds()
	since, err := s.opts.Contexts.CurrentRevision(ctx)
	if err != nil {
		return "", err
	}
	id := appcontext.NewID()
	next := s.action(catalog.StateInstantiated, id)
	next.Revision = 1
	if _, err := s.opts.Catalog.TransitionDIG(ctx, dig, from, next, id); err != nil {
		return "", err
	}
	meta := appcontext.Meta{
		ID: id, Kind: "dig", Group: Group(dig),
		Project: dig[0], CompositeApp: dig[1], Version: dig[2], DIG: dig[3],
		CompositeProfile: obj.Spec.CompositeProfile, Namespace: pl.namespace, LogicalCloud: pl.cloud,
		StatusID: id, Created: s.opts.Now(), FieldValidation: obj.Spec.FieldValidation,
		Revision: 1, Dependencies: pl.deps, SyncPolicy: PolicyOf(obj.Spec),
	}
	start = time.Now()
	if err := s.opts.Contexts.Create(ctx, meta, appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()}, placements); err != nil {
		return "", fmt.Errorf("record context: %w", err)
	}
	storeMS := time.Since(start).Milliseconds()
	if err := s.clustersAlive(ctx, placements); err != nil {
		return "", s.abandon(ctx, dig, id, err)
	}
	s.opts.Rsync.Instantiate(meta.Group, id)
	s.record(ctx, id, newRevision(1, appcontext.RevisionInstantiate, pl, obj.Spec.FieldValidation), since)
	s.log.WithFields(logrus.Fields{"dig": strings.Join(dig, "/"), "context": id, "placements": len(placements),
		"plan_ms": planMS, "store_ms": storeMS}).Info("instantiating")
	return id, nil
}

// clustersAlive checks, once the context exists, that no cluster it
// places on was deleted meanwhile (rendering takes a while). A cluster's
// delete marks it first and then looks for live contexts on it, so either
// that look finds this context (409 for the delete) or this check finds
// the mark (and the instantiate gives up).
func (s *Service) clustersAlive(ctx context.Context, placements []*appcontext.Placement) error {
	seen := map[appcontext.ClusterRef]bool{}
	var keys []catalog.Key
	for _, p := range placements {
		if !seen[p.Cluster] {
			seen[p.Cluster] = true
			keys = append(keys, catalog.Key{p.Cluster.Provider, p.Cluster.Name})
		}
	}
	key, err := catalog.For[catalog.Empty](s.opts.Catalog, catalog.Clusters).AliveAll(ctx, keys)
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrConflict) {
		ref := appcontext.ClusterRef{Provider: key[0], Name: key[1]}
		return errdefs.Conflict("cluster %s was deleted while the deployment intent group was being instantiated", ref)
	}
	return err
}

// abandon ends an instantiation refused once its context existed: the
// context is Terminated with the reason, before rsync touched anything,
// and the DIG with it, so it can be instantiated again.
func (s *Service) abandon(ctx context.Context, dig catalog.Key, id string, cause error) error {
	bg := context.WithoutCancel(ctx)
	err := s.opts.Contexts.SetStatus(bg, id, appcontext.Status{Status: appcontext.Terminated, Error: cause.Error(), Updated: s.opts.Now()})
	if _, terr := s.opts.Catalog.TransitionDIG(bg, dig, []string{catalog.StateInstantiated}, s.action(catalog.StateTerminated, id), ""); terr != nil {
		err = errors.Join(err, terr)
	}
	return errors.Join(fmt.Errorf("%w; nothing was deployed and the deployment intent group is Terminated", cause), err)
}

// Update re-renders the DIG and applies the difference to its current
// context, under the same status context id: changed objects are applied,
// objects no longer rendered are deleted, and whatever is not Applied
// (Failed, Waiting, Retrying) is tried again. It is also how a failed DIG
// is retried without terminating it, as in EMCO. An update supersedes the
// action in flight on the DIG (an instantiation still waiting for a CRD,
// say): that action is cancelled first. It returns the new revision
// number, which EMCO's update answers with.
func (s *Service) Update(ctx context.Context, dig catalog.Key) (int64, error) {
	unlock, err := s.lockInstance(ctx, Group(dig))
	if err != nil {
		return 0, err
	}
	defer unlock()
	obj, err := s.digExists(ctx, dig)
	if err != nil {
		return 0, err
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(dayTwoFrom, state.Current) {
		return 0, errdefs.Conflict("the deployment intent group is %s; update needs it to be Instantiated, Updated or InstantiateStopped", state.Current)
	}
	if !appcontext.ValidFieldValidation(obj.Spec.FieldValidation) {
		return 0, errdefs.Invalid("spec.fieldValidation %q is not one of Strict, Warn, Ignore", obj.Spec.FieldValidation)
	}
	pl, err := s.plan(ctx, dig, obj.Spec)
	if err != nil {
		return 0, err
	}
	old, err := s.opts.Contexts.Get(ctx, state.ContextID)
	if err != nil {
		return 0, err
	}
	if old.Meta.Namespace != pl.namespace || old.Meta.LogicalCloud != pl.cloud {
		return 0, errdefs.Conflict("an update cannot move the deployment intent group to another logical cloud or namespace (%q in %q now); terminate and instantiate instead",
			old.Meta.LogicalCloud, old.Meta.Namespace)
	}
	meta := old.Meta
	meta.FieldValidation, meta.Dependencies, meta.SyncPolicy = obj.Spec.FieldValidation, pl.deps, PolicyOf(obj.Spec)
	return s.redeploy(ctx, dig, old, pl.placements, meta, func(n int64) *appcontext.Revision {
		return newRevision(n, appcontext.RevisionUpdate, pl, obj.Spec.FieldValidation)
	})
}

// applyUpdate records a new plan in an existing context — new and changed
// resources, old ones marked removed, meta when not nil — and has rsync
// apply it. The action in flight on the group, if any, is cancelled
// first: the plan is diffed against a settled context.
func (s *Service) applyUpdate(ctx context.Context, group, id string, placements []*appcontext.Placement, meta *appcontext.Meta) error {
	s.opts.Rsync.Stop(group)
	if err := s.opts.Contexts.ReplaceForUpdate(ctx, id, placements, meta); err != nil {
		return err
	}
	s.opts.Rsync.Update(group, id)
	return nil
}

// Terminate cancels any action in flight and deletes the DIG's resources.
func (s *Service) Terminate(ctx context.Context, dig catalog.Key) error {
	// Under the lock of update, rollback and migrate: one of those taken by
	// another replica meanwhile would overwrite the delete action.
	unlock, err := s.lockInstance(ctx, Group(dig))
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.digExists(ctx, dig); err != nil {
		return err
	}
	from := []string{catalog.StateInstantiated, catalog.StateUpdated, catalog.StateInstantiateStopped, catalog.StateTerminateStopped}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return err
	}
	st, err := s.opts.Catalog.TransitionDIG(ctx, dig, from, s.action(catalog.StateTerminated, state.ContextID), "")
	if err != nil {
		return err
	}
	s.opts.Rsync.Terminate(Group(dig), st.ContextID)
	// A terminated context is never rolled back: its revisions go (the
	// context itself stays, for ?instance=).
	if err := s.opts.Contexts.DeleteRevisions(context.WithoutCancel(ctx), st.ContextID); err != nil {
		s.log.WithError(err).WithField("context", st.ContextID).Warn("cannot delete the revisions")
	}
	return nil
}

// Stop cancels the action in flight (instantiate, update or terminate).
func (s *Service) Stop(ctx context.Context, dig catalog.Key) error {
	if _, err := s.digExists(ctx, dig); err != nil {
		return err
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return err
	}
	next := catalog.StateInstantiateStopped
	if state.Current == catalog.StateTerminated {
		next = catalog.StateTerminateStopped
	}
	if !s.opts.Rsync.Busy(Group(dig)) {
		return errdefs.Conflict("the deployment intent group is %s and no action is in progress to stop", state.Current)
	}
	if _, err := s.opts.Catalog.TransitionDIG(ctx, dig, []string{catalog.StateInstantiated, catalog.StateUpdated, catalog.StateTerminated},
		s.action(next, state.ContextID), ""); err != nil {
		return err
	}
	if !s.opts.Rsync.Stop(Group(dig)) {
		return nil // the action finished meanwhile; its own status stands
	}
	status := appcontext.InstantiateFailed
	if next == catalog.StateTerminateStopped {
		status = appcontext.TerminateFailed
	}
	return s.opts.Contexts.SetStatus(ctx, state.ContextID, appcontext.Status{Status: status, Error: "stopped by the user"})
}

// planned is what a DIG renders to: placements, and the namespace and
// logical cloud they are deployed in.
type planned struct {
	placements []*appcontext.Placement
	namespace  string
	cloud      string // "" for the clusters' own credentials
	deps       map[string][]appcontext.Dependency
	intents    json.RawMessage // what produced the plan
}

// plan renders every app of the DIG's composite app in its logical cloud's
// namespace, places it, and applies the DIG's generic-k8s-intents.
func (s *Service) plan(ctx context.Context, dig catalog.Key, spec catalog.DIGSpec) (planned, error) {
	cat := s.opts.Catalog
	caKey := dig[:3]
	apps, err := catalog.For[catalog.Empty](cat, catalog.Apps).List(ctx, caKey)
	if err != nil {
		return planned{}, err
	}
	if len(apps) == 0 {
		return planned{}, errdefs.Invalid("composite app %s has no apps", strings.Join(caKey[1:], "/"))
	}
	byType, err := s.digIntents(ctx, dig)
	if err != nil {
		return planned{}, err
	}
	intents, err := s.appIntents(ctx, dig, byType[IntentPlacement])
	if err != nil {
		return planned{}, err
	}
	clusters, err := s.clusters(ctx)
	if err != nil {
		return planned{}, err
	}
	cloud, err := s.cloudFor(ctx, dig[0], spec.LogicalCloud)
	if err != nil {
		return planned{}, err
	}
	profiles, err := s.profiles(ctx, caKey, spec.CompositeProfile)
	if err != nil {
		return planned{}, err
	}
	overrides := map[string]map[string]string{}
	for _, ov := range spec.OverrideValues {
		overrides[ov.App] = ov.Values
	}
	names := make([]string, 0, len(apps))
	for _, app := range apps {
		names = append(names, app.Metadata.Name)
	}
	deps, err := s.dependencies(ctx, caKey, names)
	if err != nil {
		return planned{}, err
	}
	out := planned{namespace: cloud.namespace, cloud: cloud.name, deps: deps, intents: intentsOf(spec, byType, intents, deps)}
	jobs := make([]renderJob, 0, len(apps))
	for _, app := range apps {
		name := app.Metadata.Name
		intent, ok := intents[name]
		if !ok {
			return planned{}, errdefs.Invalid("app %q has no placement intent", name)
		}
		refs, err := cloud.place(name, intent, clusters)
		if err != nil {
			return planned{}, err
		}
		chart, err := catalog.For[catalog.Empty](cat, catalog.Apps).GetContent(ctx, append(append(catalog.Key{}, caKey...), name))
		if err != nil {
			return planned{}, err
		}
		jobs = append(jobs, renderJob{app: name, refs: refs, opts: render.Options{Chart: chart, Profile: profiles[name],
			ReleaseName: name, Namespace: cloud.namespace, Overrides: overrides[name]}})
	}
	if err := s.renderAll(ctx, jobs); err != nil {
		return planned{}, err
	}
	for _, j := range jobs {
		for _, ref := range j.refs {
			// Each placement gets its own slice: generic-k8s-intents change clusters apart.
			out.placements = append(out.placements, &appcontext.Placement{App: j.app, Cluster: ref, Resources: append([]appcontext.Resource(nil), j.resources...)})
		}
	}
	for _, t := range []string{IntentGAC, IntentGACLong} {
		for _, gi := range byType[t] {
			if err := s.applyGAC(ctx, dig, gi, out.placements, clusters); err != nil {
				return planned{}, err
			}
		}
	}
	return out, nil
}

// renderJob is one app to render and where it goes.
type renderJob struct {
	app       string
	refs      []appcontext.ClusterRef
	opts      render.Options
	resources []appcontext.Resource
	err       error
}

// renderAll renders the apps in parallel (the renderer bounds how many run
// at once). The first failure, in app order, is the answer; it cancels the
// renders still running, so a hostile app costs one render limit, not one
// per app.
func (s *Service) renderAll(ctx context.Context, jobs []renderJob) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range jobs {
		j := &jobs[i]
		wg.Go(func() {
			rendered, err := s.opts.Renderer.Render(ctx, j.opts)
			if err != nil {
				j.err = fmt.Errorf("app %q: %w", j.app, err)
				cancel()
				return
			}
			j.resources = toContext(rendered)
		})
	}
	wg.Wait()
	var first error
	for _, j := range jobs {
		// A render cut short by another app's failure is not the reason.
		if j.err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(j.err, context.Canceled)) {
			first = j.err
		}
	}
	return first
}

// toContext turns rendered objects into AppContext resources.
func toContext(rendered []render.Resource) []appcontext.Resource {
	out := make([]appcontext.Resource, 0, len(rendered))
	for _, r := range rendered {
		out = append(out, appcontext.Resource{GVK: r.GVK, Name: r.Name, Namespace: r.Namespace, Manifest: r.Manifest, Hook: hookOf(r.Hook)})
	}
	return out
}

// hookOf carries a rendered Helm hook's annotations into the context.
func hookOf(h *render.Hook) *appcontext.Hook {
	if h == nil {
		return nil
	}
	return &appcontext.Hook{Events: h.Events, Weight: h.Weight, DeletePolicies: h.DeletePolicies}
}

// appIntents reads the app intents of the DIG's generic placement intent(s).
func (s *Service) appIntents(ctx context.Context, dig catalog.Key, gpis []string) (map[string]catalog.PlacementIntent, error) {
	cat := s.opts.Catalog
	if len(gpis) == 0 {
		return nil, errdefs.Invalid("the deployment intent group names no genericPlacementIntent in its intents")
	}
	out := map[string]catalog.PlacementIntent{}
	for _, gpi := range gpis {
		ais, err := catalog.For[catalog.AppIntentSpec](cat, catalog.AppIntents).List(ctx, append(append(catalog.Key{}, dig...), gpi))
		if err != nil {
			return nil, err
		}
		for _, ai := range ais {
			pi := out[ai.Spec.App]
			pi.AllOf = append(pi.AllOf, ai.Spec.Intent.AllOf...)
			pi.AnyOf = append(pi.AnyOf, ai.Spec.Intent.AnyOf...)
			out[ai.Spec.App] = pi
		}
	}
	return out, nil
}

// clusters lists every registered cluster with its labels: per provider,
// its clusters (a List) and all their labels (EachUnder), not a List per
// cluster — two linearizable reads per cluster, one after another, were
// the largest part of an instantiation on 10,000 clusters.
func (s *Service) clusters(ctx context.Context) ([]placement.Cluster, error) {
	cat := s.opts.Catalog
	providers, err := catalog.For[catalog.Empty](cat, catalog.ClusterProviders).List(ctx, catalog.Key{})
	if err != nil {
		return nil, err
	}
	var out []placement.Cluster
	for _, p := range providers {
		cs, err := catalog.For[catalog.Empty](cat, catalog.Clusters).List(ctx, catalog.Key{p.Metadata.Name})
		if err != nil {
			return nil, err
		}
		labels := map[string][]string{}
		err = catalog.For[catalog.Empty](cat, catalog.ClusterLabels).EachUnder(ctx, catalog.Key{p.Metadata.Name}, func(k catalog.Key, _ catalog.Object[catalog.Empty]) error {
			labels[k[1]] = append(labels[k[1]], k[2])
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			out = append(out, placement.Cluster{Ref: appcontext.ClusterRef{Provider: p.Metadata.Name, Name: c.Metadata.Name}, Labels: labels[c.Metadata.Name]})
		}
	}
	return out, nil
}

// profiles returns each app's profile archive from the composite profile.
func (s *Service) profiles(ctx context.Context, caKey catalog.Key, compositeProfile string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if compositeProfile == "" {
		return out, nil
	}
	cpKey := append(append(catalog.Key{}, caKey...), compositeProfile)
	profiles := catalog.For[catalog.AppProfileSpec](s.opts.Catalog, catalog.AppProfiles)
	list, err := profiles.List(ctx, cpKey)
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		data, err := profiles.GetContent(ctx, append(append(catalog.Key{}, cpKey...), p.Metadata.Name))
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		out[p.Spec.App] = data
	}
	return out, nil
}
