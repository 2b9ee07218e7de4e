package catalog

import (
	"context"
	"slices"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/bson"
)

// lifecycles is the lifecycle collection as the index sees it: one entry
// per group (<prefix>/catalog/lifecycle/<group>), so what the overview
// needs of every DIG's state is in etcd, and in memory beside the
// contexts (Mirror), rather than one FerretDB collection scan per DIG.
var lifecycles = &Kind{Name: "group", Collection: "lifecycle"}

// mirrorState copies a lifecycle's document into the index after a write
// to it. Best effort: the write itself happened, and a failure here only
// leaves the overview's copy stale until the next write to the lifecycle
// or the next start-up, which reconciles the index.
func (c *Catalog) mirrorState(ctx context.Context, group string) {
	if x := c.index(); x != nil {
		_ = c.refresh(context.WithoutCancel(ctx), x, lifecycles, Key{group})
	}
}

// Mirror is an in-memory copy of the index entries the overview needs
// (every DIG, every v1 instance and every lifecycle), fed with the index's
// keys by whatever follows them in etcd: the context cache's watch
// (appcontext.Cache.Follow), so the overview costs no store read at all.
type Mirror struct {
	base, digs, instances, states string // key prefixes

	mu       sync.RWMutex
	sorted   []MirroredDIG // digMap in key order; nil when it changed
	digMap   map[string]MirroredDIG
	instMap  map[string]MirroredInstance
	stateMap map[string]MirroredState
}

// MirroredDIG is what the mirror keeps of a DIG.
type MirroredDIG struct {
	Key              Key
	Group            string // its lifecycle's (DIGGroup)
	CompositeProfile string
}

// MirroredInstance is what the mirror keeps of a v1 instance.
type MirroredInstance struct {
	ID          string
	ReleaseName string
	Request     InstanceRequest
}

// MirroredState is what the mirror keeps of a lifecycle.
type MirroredState struct {
	Current, ContextID, StatusContextID string
}

// NewMirror returns an empty mirror of the index under the etcd prefix
// ("" means "/argus"); its Prefix is where the keys it wants start.
func NewMirror(prefix string) *Mirror {
	if prefix == "" {
		prefix = "/argus"
	}
	base := strings.TrimRight(prefix, "/") + "/catalog/"
	m := &Mirror{base: base, digs: base + DeploymentIntentGroups.Collection + "/", instances: base + Instances.Collection + "/",
		states: base + lifecycles.Collection + "/"}
	m.Reset()
	return m
}

// Prefix is the etcd key prefix of every entry the mirror keeps.
func (m *Mirror) Prefix() string { return m.base }

// Reset forgets everything.
func (m *Mirror) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sorted = nil
	m.digMap, m.instMap, m.stateMap = map[string]MirroredDIG{}, map[string]MirroredInstance{}, map[string]MirroredState{}
}

// Apply records one index key's value (or its deletion); keys of other
// kinds and values that do not decode are ignored.
func (m *Mirror) Apply(key string, value []byte, deleted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case strings.HasPrefix(key, m.digs):
		m.sorted = nil
		id := strings.TrimPrefix(key, m.digs)
		var obj Object[DIGSpec]
		if deleted || bson.Unmarshal(value, &obj) != nil {
			delete(m.digMap, id)
			return
		}
		key := Key(strings.Split(id, indexSep))
		m.digMap[id] = MirroredDIG{Key: key, Group: DIGGroup(key), CompositeProfile: obj.Spec.CompositeProfile}
	case strings.HasPrefix(key, m.instances):
		id := strings.TrimPrefix(key, m.instances)
		var obj Object[InstanceSpec]
		if deleted || bson.Unmarshal(value, &obj) != nil {
			delete(m.instMap, id)
			return
		}
		m.instMap[id] = MirroredInstance{ID: id, ReleaseName: obj.Spec.ReleaseName, Request: obj.Spec.Request}
	case strings.HasPrefix(key, m.states):
		group := strings.TrimPrefix(key, m.states)
		var st DIGState
		if deleted || bson.Unmarshal(value, &st) != nil {
			delete(m.stateMap, group)
			return
		}
		m.stateMap[group] = MirroredState{Current: st.Current, ContextID: st.ContextID, StatusContextID: st.StatusContextID}
	}
}

// DIGs lists every DIG in key order; the caller must not change the list.
func (m *Mirror) DIGs() []MirroredDIG {
	m.mu.RLock()
	out := m.sorted
	m.mu.RUnlock()
	if out != nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sorted == nil {
		m.sorted = make([]MirroredDIG, 0, len(m.digMap))
		for _, d := range m.digMap {
			m.sorted = append(m.sorted, d)
		}
		slices.SortFunc(m.sorted, func(a, b MirroredDIG) int { return slices.Compare(a.Key, b.Key) })
	}
	return m.sorted
}

// Instances lists every v1 instance by id.
func (m *Mirror) Instances() []MirroredInstance {
	m.mu.RLock()
	out := make([]MirroredInstance, 0, len(m.instMap))
	for _, i := range m.instMap {
		out = append(out, i)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b MirroredInstance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// State is a lifecycle's state; one never acted on is Created.
func (m *Mirror) State(group string) MirroredState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if st, ok := m.stateMap[group]; ok {
		return st
	}
	return MirroredState{Current: StateCreated}
}
