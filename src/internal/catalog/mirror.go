package catalog

import (
	"context"
	"iter"
	"slices"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
)

// lifecycles is the lifecycle collection as the index sees it: one entry
// per group (<prefix>/catalog/lifecycle/<group>), so what the overview
// needs of every DIG's state is in etcd, and in memory beside the
// contexts (Mirror), rather than one FerretDB collection scan per DIG.
var lifecycles = &Kind{Name: "group", Collection: "lifecycle"}

// writeState runs one write to a lifecycle's document in MongoDB (write
// says whether it matched anything) under a write intent (see intent),
// then copies the document into the index in the transaction that
// removes the intent. The index is where GetState reads lifecycles, so
// that status and notifications need no MongoDB; a writer stopped between
// the two stores leaves its intent, which any replica repairs, so the
// entry follows MongoDB at every write. The write's outcome is MongoDB's:
// an index that cannot follow now (etcd not answering) is repaired later.
func (c *Catalog) writeState(ctx context.Context, group string, write func() (bool, error)) (bool, error) {
	x := c.index()
	in, err := c.begin(ctx, x, lifecycles, Key{group}, intentContent{})
	if err != nil {
		return false, err
	}
	done, err := write()
	if err != nil || !done {
		if err == nil {
			in.untouched()
		}
		return false, in.end(err)
	}
	if x == nil {
		return true, in.end(nil)
	}
	if err := c.refresh(context.WithoutCancel(ctx), x, lifecycles, Key{group}, in); err != nil {
		c.log().WithError(err).WithField("lifecycle", group).Warn("the catalogue index follows this lifecycle once etcd answers")
		_ = in.end(err) // marks the intent for repair
		return true, nil
	}
	return true, in.end(nil)
}

// readState reads a lifecycle back from MongoDB after its write.
func (c *Catalog) readState(ctx context.Context, group string) (DIGState, error) {
	st, _, err := c.getState(ctx, group)
	return st, err
}

// inserted, matched and deleted say whether a write took, for writeState:
// a duplicate key is another writer's insert, not an error.
func inserted(_ *mongo.InsertOneResult, err error) (bool, error) {
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	return err == nil, err
}

func matched(res *mongo.UpdateResult, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	return res.MatchedCount == 1, nil
}

func deleted(res *mongo.DeleteResult, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	return res.DeletedCount == 1, nil
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

// Replace replaces everything the mirror keeps with entries, at once for
// its readers (appcontext.Follower: keys went while the cache's watch was
// broken, and entries are all there are).
func (m *Mirror) Replace(entries iter.Seq2[string, []byte]) {
	fresh := &Mirror{digs: m.digs, instances: m.instances, states: m.states}
	fresh.Reset()
	for k, v := range entries {
		fresh.Apply(k, v, false)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sorted = nil
	m.digMap, m.instMap, m.stateMap = fresh.digMap, fresh.instMap, fresh.stateMap
}

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
