package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Day-2 operations on an instantiated DIG (EMCO's update, rollback and
// migrate) and the app dependencies that order its apps. Every
// instantiate, update, rollback and migrate records a revision of the
// context: the resolved desired state (manifests by reference to the
// context's stored ones) and the intents that produced it, in etcd beside
// the context, the newest Options.RevisionLimit kept. An update or a
// rollback writes its desired state into the DIG's context and has rsync
// apply the difference (create, patch, delete; what moves between
// clusters is removed from the old one) under the same status context id.

// intentRecord is what produced a revision, as it is kept with it.
type intentRecord struct {
	DIG          catalog.DIGSpec                    `json:"deploymentIntentGroup"`
	Intents      map[string][]string                `json:"intents"`
	AppIntents   map[string]catalog.PlacementIntent `json:"appIntents"`
	Dependencies map[string][]appcontext.Dependency `json:"dependencies,omitempty"`
}

// from is where a DIG's update, rollback and migrate start from.
var dayTwoFrom = []string{catalog.StateInstantiated, catalog.StateUpdated, catalog.StateInstantiateStopped}

// lastRevision is the revision a transition just recorded.
func lastRevision(st catalog.DIGState) int64 {
	if n := len(st.Actions); n > 0 {
		return st.Actions[n-1].Revision
	}
	return 0
}

// record keeps a revision of context id. A failure is logged, not
// returned: the action goes on, and only a rollback to this revision is
// lost.
func (s *Service) record(ctx context.Context, id string, rev *appcontext.Revision, since int64) {
	if err := s.opts.Contexts.PutRevision(context.WithoutCancel(ctx), id, rev, s.opts.RevisionLimit, since); err != nil {
		s.log.WithError(err).WithFields(logrus.Fields{"context": id, "revision": rev.Number}).Warn("cannot record the revision")
	}
}

// newRevision is the revision of a plan.
func newRevision(n int64, action string, pl planned, fieldValidation string) *appcontext.Revision {
	rev := appcontext.NewRevision(n, action, pl.placements)
	rev.Intents, rev.Dependencies, rev.FieldValidation = pl.intents, pl.deps, fieldValidation
	return rev
}

// Rollback returns the DIG to an earlier revision of its context (EMCO's
// POST …/rollback with {"spec":{"revision":"N"}}) through the same diff as
// an update, and records it as a new revision. The intents in the
// catalogue stay as they are: the next update applies them again.
func (s *Service) Rollback(ctx context.Context, dig catalog.Key, revision string) (int64, error) {
	unlock, err := s.lockInstance(ctx, Group(dig))
	if err != nil {
		return 0, err
	}
	defer unlock()
	if _, err := s.digExists(ctx, dig); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(revision), 10, 64)
	if err != nil || n < 1 {
		return 0, errdefs.Invalid("spec.revision %q is not a revision number", revision)
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(dayTwoFrom, state.Current) {
		return 0, errdefs.Conflict("the deployment intent group is %s; rollback needs it to be Instantiated, Updated or InstantiateStopped", state.Current)
	}
	rev, err := s.opts.Contexts.Revision(ctx, state.ContextID, n)
	if errors.Is(err, errdefs.ErrNotFound) {
		kept, _ := s.opts.Contexts.Revisions(ctx, state.ContextID)
		return 0, errdefs.NotFound("revision %d of the deployment intent group is not kept (kept: %s)", n, joinInts(kept))
	}
	if err != nil {
		return 0, err
	}
	old, err := s.opts.Contexts.Get(ctx, state.ContextID)
	if err != nil {
		return 0, err
	}
	meta := old.Meta
	meta.Dependencies, meta.FieldValidation = rev.Dependencies, rev.FieldValidation
	placements := rev.AsPlacements()
	number, err := s.redeploy(ctx, dig, old, placements, meta, func(number int64) *appcontext.Revision {
		again := appcontext.NewRevision(number, appcontext.RevisionRollback, placements)
		again.From, again.Intents, again.Dependencies, again.FieldValidation = n, rev.Intents, rev.Dependencies, rev.FieldValidation
		return again
	})
	if err == nil {
		s.log.WithFields(logrus.Fields{"dig": strings.Join(dig, "/"), "context": old.Meta.ID, "revision": number, "from": n}).Info("rolling back")
	}
	return number, err
}

// redeploy makes the next revision of a DIG's context: it records the
// action (numbered in the transition itself), writes placements and meta
// into the context, has rsync apply the difference, and keeps the
// revision that revision builds. It returns the revision number.
func (s *Service) redeploy(ctx context.Context, dig catalog.Key, old *appcontext.Context, placements []*appcontext.Placement,
	meta appcontext.Meta, revision func(number int64) *appcontext.Revision) (int64, error) {
	since, err := s.opts.Contexts.CurrentRevision(ctx)
	if err != nil {
		return 0, err
	}
	next := s.action(catalog.StateUpdated, old.Meta.ID)
	next.Revision = catalog.NextRevision
	st, err := s.opts.Catalog.TransitionDIG(ctx, dig, dayTwoFrom, next, "")
	if err != nil {
		return 0, err
	}
	number := lastRevision(st)
	meta.Revision = number
	if err := s.applyUpdate(ctx, Group(dig), old.Meta.ID, placements, &meta); err != nil {
		return 0, err
	}
	s.record(ctx, old.Meta.ID, revision(number), since)
	return number, nil
}

// Migrate moves an instantiated DIG's deployment to another DIG of the
// composite app, usually of another version (EMCO's POST …/migrate with
// spec.targetCompositeAppVersion and spec.targetDeploymentIntentGroup).
// The target must be Approved; it is instantiated with a new context that
// keeps the source's status context id, so objects both have are changed
// in place (not deleted and created, pods not relabelled), what only the
// source has is deleted, and what only the target has is created. The
// source is Terminated without deleting anything: its objects are the
// target's now. (EMCO records the source as Updated; Argus ends it, so
// terminating the source cannot delete the target's objects.)
func (s *Service) Migrate(ctx context.Context, dig catalog.Key, targetVersion, targetDIG string) error {
	for what, v := range map[string]string{"targetCompositeAppVersion": targetVersion, "targetDeploymentIntentGroup": targetDIG} {
		if err := catalog.ValidateName("spec."+what, v); err != nil {
			return err
		}
	}
	target := catalog.Key{dig[0], dig[1], targetVersion, targetDIG}
	if slices.Equal(target, dig) {
		return errdefs.Invalid("a deployment intent group cannot migrate to itself")
	}
	groups := []string{Group(dig), Group(target)}
	sort.Strings(groups) // one order, so two migrations never wait for each other
	for _, g := range groups {
		unlock, err := s.lockInstance(ctx, g)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if _, err := s.digExists(ctx, dig); err != nil {
		return err
	}
	tobj, err := s.digExists(ctx, target)
	if err != nil {
		return err
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return err
	}
	if !slices.Contains(dayTwoFrom, state.Current) {
		return errdefs.Conflict("the deployment intent group is %s; migrate needs it to be Instantiated, Updated or InstantiateStopped", state.Current)
	}
	tstate, err := s.opts.Catalog.GetDIGState(ctx, target)
	if err != nil {
		return err
	}
	if tstate.Current != catalog.StateApproved {
		return errdefs.Conflict("the target deployment intent group is %s; migrate needs it to be Approved", tstate.Current)
	}
	if !appcontext.ValidFieldValidation(tobj.Spec.FieldValidation) {
		return errdefs.Invalid("the target's spec.fieldValidation %q is not one of Strict, Warn, Ignore", tobj.Spec.FieldValidation)
	}
	pl, err := s.plan(ctx, target, tobj.Spec)
	if err != nil {
		return err
	}
	since, err := s.opts.Contexts.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	// Refused before anything stops: rsync never changes a context's Meta.
	old, err := s.opts.Contexts.Get(ctx, state.ContextID)
	if err != nil {
		return err
	}
	if old.Meta.Namespace != pl.namespace || old.Meta.LogicalCloud != pl.cloud {
		return errdefs.Conflict("the target deploys in logical cloud %q, namespace %q, the source in %q, %q: a migration changes objects in place and cannot move them",
			pl.cloud, pl.namespace, old.Meta.LogicalCloud, old.Meta.Namespace)
	}
	// The source's action is cancelled first: its objects are diffed
	// against a settled context, read again once it stopped.
	s.opts.Rsync.Stop(Group(dig))
	if old, err = s.opts.Contexts.Get(ctx, state.ContextID); err != nil {
		return err
	}
	id := appcontext.NewID()
	next := s.action(catalog.StateInstantiated, id)
	next.Revision = 1
	if _, err := s.opts.Catalog.TransitionDIG(ctx, target, []string{catalog.StateApproved}, next, old.Meta.StatusID); err != nil {
		return err
	}
	meta := appcontext.Meta{
		ID: id, Kind: "dig", Group: Group(target),
		Project: target[0], CompositeApp: target[1], Version: target[2], DIG: target[3],
		CompositeProfile: tobj.Spec.CompositeProfile, Namespace: pl.namespace, LogicalCloud: pl.cloud,
		StatusID: old.Meta.StatusID, Created: s.opts.Now(), FieldValidation: tobj.Spec.FieldValidation,
		Revision: 1, Dependencies: pl.deps, SyncPolicy: PolicyOf(tobj.Spec),
	}
	if err := s.opts.Contexts.Create(ctx, meta, appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()},
		appcontext.MergeForUpdate(old, pl.placements)); err != nil {
		return fmt.Errorf("record context: %w", err)
	}
	if _, err := s.opts.Catalog.TransitionDIG(ctx, dig, dayTwoFrom, s.action(catalog.StateTerminated, old.Meta.ID), ""); err != nil {
		return err
	}
	if err := s.opts.Contexts.SetStatus(ctx, old.Meta.ID, appcontext.Status{Status: appcontext.Terminated,
		Error: "migrated to " + strings.Join(target[2:], "/")}); err != nil {
		return err
	}
	s.opts.Rsync.Instantiate(meta.Group, id)
	s.record(ctx, id, newRevision(1, appcontext.RevisionMigrate, pl, tobj.Spec.FieldValidation), since)
	if err := s.opts.Contexts.DeleteRevisions(context.WithoutCancel(ctx), old.Meta.ID); err != nil {
		s.log.WithError(err).WithField("context", old.Meta.ID).Warn("cannot delete the source's revisions")
	}
	s.log.WithFields(logrus.Fields{"dig": strings.Join(dig, "/"), "target": strings.Join(target, "/"), "context": id,
		"status_context": old.Meta.StatusID}).Info("migrating")
	return nil
}

func joinInts(ns []int64) string {
	if len(ns) == 0 {
		return "none"
	}
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ", ")
}

// MaxDependencyWait bounds a dependency's wait, as EMCO's schema does.
const MaxDependencyWait = 4096

// ValidateDependency checks an app dependency as EMCO's schema does and
// spells its opStatus as Argus does (Ready, Deployed; EMCO takes any case).
func ValidateDependency(spec *catalog.AppDependencySpec) error {
	if err := catalog.ValidateName("spec.app", spec.App); err != nil {
		return err
	}
	switch {
	case strings.EqualFold(spec.OpStatus, catalog.OpStatusReady):
		spec.OpStatus = catalog.OpStatusReady
	case strings.EqualFold(spec.OpStatus, catalog.OpStatusDeployed):
		spec.OpStatus = catalog.OpStatusDeployed
	default:
		return errdefs.Invalid("spec.opStatus %q is not one of Ready, Deployed", spec.OpStatus)
	}
	if spec.Wait < 0 || spec.Wait > MaxDependencyWait {
		return errdefs.Invalid("spec.wait %d is out of range 0..%d seconds", spec.Wait, MaxDependencyWait)
	}
	return nil
}

// dependencies reads the app dependencies of a composite app's apps,
// checks that each names one of its apps, and refuses cycles.
func (s *Service) dependencies(ctx context.Context, caKey catalog.Key, apps []string) (map[string][]appcontext.Dependency, error) {
	deps := catalog.For[catalog.AppDependencySpec](s.opts.Catalog, catalog.AppDependencies)
	out := map[string][]appcontext.Dependency{}
	for _, app := range apps {
		list, err := deps.List(ctx, append(append(catalog.Key{}, caKey...), app))
		if err != nil {
			return nil, err
		}
		for _, d := range list {
			spec := d.Spec
			if err := ValidateDependency(&spec); err != nil {
				return nil, fmt.Errorf("app %q dependency %q: %w", app, d.Metadata.Name, err)
			}
			if !slices.Contains(apps, spec.App) {
				return nil, errdefs.Invalid("app %q depends on %q, which is not an app of the composite app", app, spec.App)
			}
			out[app] = append(out[app], appcontext.Dependency{App: spec.App, OpStatus: spec.OpStatus, Wait: time.Duration(spec.Wait) * time.Second})
		}
	}
	if cycle := findCycle(out); cycle != nil {
		return nil, errdefs.Invalid("the app dependencies form a cycle: %s", strings.Join(cycle, " -> "))
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// findCycle returns a dependency cycle (its first app repeated last), or
// nil. Apps are visited in name order, so the answer is stable.
func findCycle(deps map[string][]appcontext.Dependency) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var path []string
	var visit func(app string) []string
	visit = func(app string) []string {
		switch mark[app] {
		case onPath:
			i := slices.Index(path, app)
			return append(append([]string{}, path[i:]...), app)
		case done:
			return nil
		}
		mark[app] = onPath
		path = append(path, app)
		for _, d := range deps[app] {
			if c := visit(d.App); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		mark[app] = done
		return nil
	}
	apps := make([]string, 0, len(deps))
	for app := range deps {
		apps = append(apps, app)
	}
	sort.Strings(apps)
	for _, app := range apps {
		if c := visit(app); c != nil {
			return c
		}
	}
	return nil
}

// intentsOf records what produced a plan.
func intentsOf(spec catalog.DIGSpec, byType map[string][]string, appIntents map[string]catalog.PlacementIntent, deps map[string][]appcontext.Dependency) json.RawMessage {
	data, err := json.Marshal(intentRecord{DIG: spec, Intents: byType, AppIntents: appIntents, Dependencies: deps})
	if err != nil {
		return nil
	}
	return data
}
