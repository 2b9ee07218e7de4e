package deploy

import (
	"context"
	"net/url"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// DriftFinder lists what drifted in a context: Applied resources OutOfSync
// or Missing on their cluster, narrowed by the app, cluster and resource
// values of filter (the status engine implements it).
type DriftFinder interface {
	Drifted(ctx context.Context, id string, filter url.Values) ([]appcontext.Drifted, error)
}

// SyncResult answers a sync: the context it works on and what it will
// re-apply (empty when nothing drifted).
type SyncResult struct {
	Instance  string       `json:"instance"`
	Resources []SyncTarget `json:"resources"`
}

// SyncTarget is one resource a sync re-applies, and why.
type SyncTarget struct {
	App             string `json:"app"`
	ClusterProvider string `json:"cluster-provider"`
	Cluster         string `json:"cluster"`
	GVK             struct {
		Group   string `json:"Group"`
		Version string `json:"Version"`
		Kind    string `json:"Kind"`
	} `json:"GVK"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
	SyncStatus string `json:"syncStatus"`
	SyncReason string `json:"syncReason,omitempty"`
}

// SyncDIG re-applies what drifted in the DIG's current context, narrowed
// by filter (app, cluster as <provider>+<cluster>, resource as a name or
// Kind/name; values of one ORed, different ones ANDed).
func (s *Service) SyncDIG(ctx context.Context, dig catalog.Key, filter url.Values) (SyncResult, error) {
	if _, err := s.digExists(ctx, dig); err != nil {
		return SyncResult{}, err
	}
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil {
		return SyncResult{}, err
	}
	if !slices.Contains(dayTwoFrom, state.Current) {
		return SyncResult{}, errdefs.Conflict("the deployment intent group is %s; sync needs it to be Instantiated, Updated or InstantiateStopped", state.Current)
	}
	return s.Sync(ctx, Group(dig), state.ContextID, filter, appcontext.HealBySync, nil)
}

// SyncInstance re-applies what drifted in a v1 instance (see SyncDIG).
func (s *Service) SyncInstance(ctx context.Context, id string, filter url.Values) (SyncResult, error) {
	if _, err := s.instances().Get(ctx, catalog.Key{id}); err != nil {
		return SyncResult{}, err
	}
	return s.Sync(ctx, InstanceGroup(id), id, filter, appcontext.HealBySync, nil)
}

// Sync records what drifted in the context as its sync request and asks
// the group's owner to re-apply it (an rsync action, so it runs where the
// group's other actions do and survives a hand-over). by says who asks:
// sync or self-heal; pick, when not nil, keeps only some of what drifted.
// It is refused while an action runs on the group or the context is not
// deployed (Conflict).
func (s *Service) Sync(ctx context.Context, group, id string, filter url.Values, by string, pick func(appcontext.Drifted) bool) (SyncResult, error) {
	out := SyncResult{Instance: id, Resources: []SyncTarget{}}
	if s.opts.Drift == nil {
		return out, errdefs.Unavailable(nil, "drift is not tracked by this process")
	}
	unlock, err := s.lockInstance(ctx, group)
	if err != nil {
		return out, err
	}
	defer unlock()
	c, err := s.opts.Contexts.Get(ctx, id)
	if err != nil {
		return out, err
	}
	switch c.Status.Status {
	case appcontext.Instantiated, appcontext.InstantiateFailed, appcontext.Updated, appcontext.UpdateFailed:
	default:
		return out, errdefs.Conflict("the context is %s; sync needs it deployed (Instantiated or Updated)", c.Status.Status)
	}
	if s.opts.Rsync.Busy(group) {
		return out, errdefs.Conflict("an action is in progress; sync when it is done")
	}
	drifted, err := s.opts.Drift.Drifted(ctx, id, filter)
	if err != nil {
		return out, err
	}
	req := appcontext.HealRequest{By: by, Requested: s.opts.Now()}
	for _, d := range drifted {
		if pick == nil || pick(d) {
			req.Targets = append(req.Targets, d.HealTarget)
			out.Resources = append(out.Resources, targetView(d.HealTarget))
		}
	}
	if len(req.Targets) == 0 {
		return out, nil
	}
	if err := s.opts.Contexts.PutHeal(ctx, id, req); err != nil {
		return out, err
	}
	if err := s.opts.Rsync.Sync(ctx, group, id); err != nil {
		_ = s.opts.Contexts.ClearHeal(context.WithoutCancel(ctx), id)
		return out, err
	}
	s.log.WithFields(logrus.Fields{"group": group, "context": id, "by": by, "resources": len(req.Targets)}).Info("re-applying what drifted")
	return out, nil
}

func targetView(t appcontext.HealTarget) SyncTarget {
	v := SyncTarget{App: t.App, ClusterProvider: t.Cluster.Provider, Cluster: t.Cluster.Name, Name: t.Name, Namespace: t.Namespace,
		SyncStatus: t.Was, SyncReason: t.Reason}
	v.GVK.Group, v.GVK.Version, v.GVK.Kind = t.GVK.Group, t.GVK.Version, t.GVK.Kind
	return v
}

// PolicyOf is a DIG's sync policy as its contexts keep it.
func PolicyOf(spec catalog.DIGSpec) appcontext.SyncPolicy {
	if spec.SyncPolicy == nil {
		return appcontext.SyncPolicy{}
	}
	return appcontext.SyncPolicy{SelfHeal: spec.SyncPolicy.SelfHeal, Adopt: spec.SyncPolicy.Adopt}
}

func instancePolicy(req catalog.InstanceRequest) appcontext.SyncPolicy {
	if req.SyncPolicy == nil {
		return appcontext.SyncPolicy{}
	}
	return appcontext.SyncPolicy{SelfHeal: req.SyncPolicy.SelfHeal, Adopt: req.SyncPolicy.Adopt}
}

// SetSyncPolicy makes a DIG's sync policy (just written by a PUT) take
// effect at once in its current context, with no update: self-heal starts
// or stops, adoption applies to the next apply.
func (s *Service) SetSyncPolicy(ctx context.Context, dig catalog.Key, spec catalog.DIGSpec) error {
	state, err := s.opts.Catalog.GetDIGState(ctx, dig)
	if err != nil || state.ContextID == "" || state.Current == catalog.StateTerminated {
		return err
	}
	want := PolicyOf(spec)
	// A PUT that leaves the policy as it is must not wait behind an
	// action holding the group's lock: look before locking.
	if c, err := s.opts.Contexts.Get(ctx, state.ContextID); err != nil || c.Meta.SyncPolicy == want {
		return err
	}
	unlock, err := s.lockInstance(ctx, Group(dig))
	if err != nil {
		return err
	}
	defer unlock()
	c, err := s.opts.Contexts.Get(ctx, state.ContextID)
	if err != nil {
		return err
	}
	if c.Meta.SyncPolicy == want {
		return nil
	}
	meta := c.Meta
	meta.SyncPolicy = want
	s.log.WithFields(logrus.Fields{"dig": dig, "selfHeal": want.SelfHeal, "adopt": want.Adopt}).Info("sync policy changed")
	return s.opts.Contexts.SetMeta(ctx, meta)
}
