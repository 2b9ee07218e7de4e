package agent

import (
	"context"
	"maps"
	"sort"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/rsync"
)

// localStore is the agent's copy of its work as rsync contexts: one
// context per placement, holding that placement only. The rsync engine
// reads it and records into it as it does into etcd on the orchestrator;
// what it records goes to the reporter, labelled with the generation the
// action works on.
type localStore struct {
	ref appcontext.ClusterRef
	r   Reporter

	mu       sync.Mutex
	contexts map[string]*local
}

type local struct {
	key WorkKey
	gen int64
	ctx appcontext.Context
}

var _ rsync.Contexts = (*localStore)(nil)

func newLocalStore(ref appcontext.ClusterRef, r Reporter) *localStore {
	return &localStore{ref: ref, r: r, contexts: map[string]*local{}}
}

// localID is the id of a placement's local context.
func localID(k WorkKey) string { return k.Context + "/" + k.App }

// put makes w the placement's desired state, keeping the statuses of the
// resources it still has (rsync applies only what changed); it reports
// whether the placement is new.
func (s *localStore) put(w Work) bool {
	id := localID(w.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.contexts[id]
	isNew := l == nil
	if isNew {
		l = &local{key: w.Key}
		s.contexts[id] = l
	}
	statuses := map[string]appcontext.ResourceStatus{}
	if len(l.ctx.Placements) > 0 {
		statuses = l.ctx.Placements[0].Statuses
	}
	p := &appcontext.Placement{App: w.Key.App, Cluster: s.ref, Statuses: map[string]appcontext.ResourceStatus{}}
	for i, r := range w.Resources {
		res := appcontext.Resource{GVK: r.GVK, Name: r.Name, Namespace: r.Namespace, Manifest: r.Manifest, Order: i, Removed: r.Removed,
			ManifestRef: &appcontext.BlobRef{SHA256: r.SHA256, Size: len(r.Manifest), Chunks: 1}, Hook: r.Hook}
		p.Resources = append(p.Resources, res)
		if st, ok := statuses[res.Key()]; ok {
			p.Statuses[res.Key()] = st
		}
	}
	l.gen = w.Generation
	group := w.Group
	if group == "" {
		group = id
	}
	// The engine chains actions by the local id (each placement runs on
	// its own); Meta.Group is the deployment's, which rsync writes as the
	// objects' owner and checks before applying over one.
	l.ctx = appcontext.Context{
		Meta: appcontext.Meta{ID: id, Kind: "fleet", Group: group, Namespace: w.Namespace, StatusID: w.StatusID,
			FieldValidation: w.FieldValidation, SyncPolicy: appcontext.SyncPolicy{Adopt: w.Adopt}},
		Status:     l.ctx.Status,
		Placements: []*appcontext.Placement{p},
	}
	return isNew
}

func (s *localStore) remove(k WorkKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.contexts, localID(k))
}

// Get returns a copy of a placement's context.
func (s *localStore) Get(_ context.Context, id string) (*appcontext.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.contexts[id]
	if l == nil {
		return nil, errdefs.NotFound("placement %s is not in the agent's work", id)
	}
	c := l.ctx
	c.Placements = make([]*appcontext.Placement, 0, len(l.ctx.Placements))
	for _, p := range l.ctx.Placements {
		cp := *p
		cp.Resources = append([]appcontext.Resource(nil), p.Resources...)
		cp.Statuses = maps.Clone(p.Statuses)
		c.Placements = append(c.Placements, &cp)
	}
	return &c, nil
}

// List lists the placements' contexts.
func (s *localStore) List(context.Context) ([]appcontext.Summary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]appcontext.Summary, 0, len(s.contexts))
	for _, l := range s.contexts {
		out = append(out, appcontext.Summary{Meta: l.ctx.Meta, Status: l.ctx.Status})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta.ID < out[j].Meta.ID })
	return out, nil
}

// SetStatus records a placement's status; an action that ended (nothing
// left to retry) settles its generation.
func (s *localStore) SetStatus(_ context.Context, id string, st appcontext.Status, _ ...clientv3.Cmp) error {
	s.mu.Lock()
	l := s.contexts[id]
	if l == nil {
		s.mu.Unlock()
		return nil
	}
	l.ctx.Status = st
	key, gen := l.key, l.gen
	s.mu.Unlock()
	if settled(st) {
		s.r.Progress(key, gen, true, true)
	}
	return nil
}

// SetResourceStatuses records resource statuses and reports them.
func (s *localStore) SetResourceStatuses(ctx context.Context, id string, updates []appcontext.StatusUpdate, ctxStatus *appcontext.Status, _ ...clientv3.Cmp) error {
	s.mu.Lock()
	l := s.contexts[id]
	if l == nil || len(l.ctx.Placements) == 0 {
		s.mu.Unlock()
		return nil
	}
	p := l.ctx.Placements[0]
	changed := map[string]appcontext.ResourceStatus{}
	for _, u := range updates {
		p.Statuses[u.Key] = u.Status
		changed[u.Key] = u.Status
	}
	key, gen := l.key, l.gen
	s.mu.Unlock()
	if len(changed) > 0 {
		s.r.Statuses(key, gen, changed)
	}
	if ctxStatus != nil {
		return s.SetStatus(ctx, id, *ctxStatus)
	}
	return nil
}

// settled reports an action that ended: a final status, and nothing still
// retried or waited for.
func settled(st appcontext.Status) bool {
	switch st.Status {
	case appcontext.Instantiating, appcontext.Updating, appcontext.Terminating, "":
		return false
	}
	return !st.Active
}
