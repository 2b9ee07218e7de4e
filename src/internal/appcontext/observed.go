package appcontext

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

// BundleSnapshot is the last ResourceBundleState status a watcher received
// for one app on one cluster, stored at
// /ctx/<id>/app/<app>/cluster/<ref>/bundle.
type BundleSnapshot struct {
	// ResourceVersion of the bundle the snapshot was taken from.
	ResourceVersion string `json:"resourceVersion"`
	// Status is the bundle's status (v1alpha1.ResourceBundleStateStatus).
	// Snapshots read by the Cache and GetWithoutManifests drop it once
	// Parsed holds it: read Parsed, and Status only when Parsed is nil.
	Status json.RawMessage `json:"status,omitempty"`
	// Deleted is set when the bundle itself was deleted.
	Deleted bool `json:"deleted,omitempty"`
	// Refused says why the watcher did not believe the bundle (too large,
	// malformed); Status is then empty.
	Refused string `json:"refused,omitempty"`
	// Received is the orchestrator's time of receipt.
	Received time.Time `json:"received"`
	// Parsed is Status decoded, and Index its entries by
	// group/kind/namespace/name; both filled when the snapshot is read
	// and Status decodes.
	Parsed *v1alpha1.ResourceBundleStateStatus `json:"-"`
	Index  BundleIndex                         `json:"-"`
}

// BundleEntry is one object a bundle reports.
type BundleEntry struct {
	Group, Kind, Name, Namespace string
	ReadyStatus, Reason          string
	// Hash is the hash of the fields Argus manages on the live object.
	Hash string
	// Owner is the object's controller (metadata.ownerReferences), if any.
	Owner OwnerRef
	// Typed or Custom is the entry itself.
	Typed  *v1alpha1.ResourceStatus
	Custom *v1alpha1.CustomResourceStatus
}

// OwnerRef names an object's controlling owner: a Pod's ReplicaSet, a
// ReplicaSet's Deployment.
type OwnerRef struct{ Group, Version, Kind, Name string }

// ownerOf is the controller among an object's owner references, or the
// first of them when none says it is.
func ownerOf(refs []metav1.OwnerReference) OwnerRef {
	if len(refs) == 0 {
		return OwnerRef{}
	}
	pick := refs[0]
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			pick = r
			break
		}
	}
	gv, _ := schema.ParseGroupVersion(pick.APIVersion)
	return OwnerRef{Group: gv.Group, Version: gv.Version, Kind: pick.Kind, Name: pick.Name}
}

// EntryRef identifies a bundle entry; a struct, so lookups allocate nothing.
type EntryRef struct{ Group, Kind, Namespace, Name string }

// trimBundle gives each of st's entry lists exactly its length: decoding
// grows them by doubling, and the cache keeps one bundle per placement.
// Call it before IndexBundle, which points into the lists.
func trimBundle(st *v1alpha1.ResourceBundleStateStatus) {
	for _, l := range st.TypedLists() {
		if cap(*l) > len(*l) {
			*l = append(make([]v1alpha1.ResourceStatus, 0, len(*l)), *l...)
		}
	}
	if cap(st.ResourceStatuses) > len(st.ResourceStatuses) {
		st.ResourceStatuses = append(make([]v1alpha1.CustomResourceStatus, 0, len(st.ResourceStatuses)), st.ResourceStatuses...)
	}
}

// BundleIndex is a bundle's entries sorted by EntryRef (a ref listed
// twice keeps its last entry). The cache keeps one for every placement of
// the fleet: a slice searched in order of its few entries costs a
// placement a fraction of a map's slots. An index of a bundle without
// entries is empty but not nil; nil means not indexed.
type BundleIndex []BundleEntry

// Get returns the entry of ref, or nil.
func (x BundleIndex) Get(ref EntryRef) *BundleEntry {
	i, ok := slices.BinarySearchFunc(x, ref, func(e BundleEntry, ref EntryRef) int { return compareRef(e.ref(), ref) })
	if !ok {
		return nil
	}
	return &x[i]
}

func (e *BundleEntry) ref() EntryRef { return EntryRef{e.Group, e.Kind, e.Namespace, e.Name} }

func compareRef(a, b EntryRef) int {
	return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Kind, b.Kind),
		strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// IndexBundle indexes a bundle status's entries, which point into st's
// lists.
func IndexBundle(st *v1alpha1.ResourceBundleStateStatus) BundleIndex {
	if st == nil {
		return BundleIndex{}
	}
	lists := st.TypedLists()
	n := len(st.ResourceStatuses)
	for _, list := range lists {
		n += len(*list)
	}
	entries := make(BundleIndex, 0, n)
	for _, list := range lists {
		for i := range *list {
			e := &(*list)[i]
			var meta struct {
				Name      string                  `json:"name"`
				Namespace string                  `json:"namespace"`
				Owners    []metav1.OwnerReference `json:"ownerReferences"`
			}
			_ = json.Unmarshal(e.Metadata.Raw, &meta)
			group, _, found := strings.Cut(e.APIVersion, "/")
			if !found {
				group = ""
			}
			o := ownerOf(meta.Owners)
			name := meta.Name
			if e.Kind != "Pod" { // a pod's name is its own on each cluster
				name = intern(name)
			}
			entries = append(entries, BundleEntry{Group: group, Kind: e.Kind, Name: name, Namespace: intern(meta.Namespace),
				ReadyStatus: e.ReadyStatus, Reason: e.Reason, Typed: e, Hash: e.ManagedFieldsHash,
				Owner: OwnerRef{Group: intern(o.Group), Version: intern(o.Version), Kind: intern(o.Kind), Name: intern(o.Name)}})
		}
	}
	for i := range st.ResourceStatuses {
		e := &st.ResourceStatuses[i]
		entries = append(entries, BundleEntry{Group: e.Group, Kind: e.Kind, Name: e.Name, Namespace: e.Namespace,
			ReadyStatus: e.ReadyStatus, Reason: e.Reason, Custom: e, Hash: e.ManagedFieldsHash})
	}
	return MakeBundleIndex(entries)
}

// MakeBundleIndex sorts entries into an index, in place; of a ref listed
// twice the last is kept, as a map filled in order would keep it.
func MakeBundleIndex(entries []BundleEntry) BundleIndex {
	if entries == nil {
		entries = []BundleEntry{}
	}
	slices.SortStableFunc(entries, func(a, b BundleEntry) int { return compareRef(a.ref(), b.ref()) })
	out := entries[:0]
	for i := range entries {
		if i+1 < len(entries) && compareRef(entries[i].ref(), entries[i+1].ref()) == 0 {
			continue // a later entry of the same ref wins
		}
		out = append(out, entries[i])
	}
	return out
}

func (s *Store) bundleKey(id, app string, c ClusterRef) string {
	return s.ctxPrefix(id) + "app/" + app + "/cluster/" + c.String() + "/bundle"
}

// PutBundle stores a bundle snapshot, if every guard holds (ErrGuard
// otherwise).
func (s *Store) PutBundle(ctx context.Context, id, app string, c ClusterRef, snap BundleSnapshot, guards ...clientv3.Cmp) error {
	data, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).If(guards...).Then(clientv3.OpPut(s.bundleKey(id, app, c), string(data))).Commit()
	if err != nil {
		return fmt.Errorf("store bundle snapshot: %w", err)
	}
	if !resp.Succeeded {
		return ErrGuard
	}
	return nil
}

// Bundle reads one stored bundle snapshot; false when there is none.
func (s *Store) Bundle(ctx context.Context, id, app string, c ClusterRef) (BundleSnapshot, bool, error) {
	var snap BundleSnapshot
	resp, err := s.cli.Get(ctx, s.bundleKey(id, app, c))
	if err != nil {
		return snap, false, fmt.Errorf("read bundle snapshot: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return snap, false, nil
	}
	return snap, true, json.Unmarshal(resp.Kvs[0].Value, &snap)
}

// Touch records that something a context's status is computed from
// changed outside the context (a logical cloud's issued certificates), so
// whoever follows the context's group (status notifications, history)
// computes it again. The key is under the context's prefix, which readers
// ignore and retention deletes with the rest.
func (s *Store) Touch(ctx context.Context, id string) error {
	_, err := s.cli.Put(ctx, s.ctxPrefix(id)+"touched", time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("touch context %s: %w", id, err)
	}
	return nil
}

// Cluster connectivity and monitor states (SPEC section 3).
const (
	Available   = "Available"
	Unreachable = "Unreachable"

	MonitorRunning      = "Running"
	MonitorSilent       = "Silent"
	MonitorNotInstalled = "NotInstalled"
)

// DefaultSilentAfter is how long a running monitor may go unheard before
// it counts as Silent, where the deployment does not say
// (--monitor-silent-after): the watchers, the hub and status answers share
// it.
const DefaultSilentAfter = 30 * time.Second

// ClusterState is what a cluster's watcher knows about it, stored at
// /clusters/<provider>+<cluster>.
type ClusterState struct {
	Connectivity string `json:"connectivity"`
	// UnreachableSince is set while Connectivity is Unreachable.
	UnreachableSince time.Time `json:"unreachableSince,omitzero"`
	Monitor          string    `json:"monitor"`
	// LastSeen is when the watcher last saw the monitor's Lease renewed
	// (the orchestrator's clock, so skew does not matter).
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Reason explains a monitor that is not Running.
	Reason string `json:"reason,omitempty"`
	// UnusableReason says why no client can be built for the cluster (its
	// stored kubeconfig is refused); Connectivity is then Unreachable.
	UnusableReason string `json:"unusableReason,omitempty"`
	// Agent marks a pull cluster, whose agent reports through the fleet
	// hub: the hub records its monitor Silent itself, and refreshes
	// LastSeen only now and then (a write per idle cluster every few
	// seconds would cost a large fleet dearly), so readers do not judge
	// silence by LastSeen's age.
	Agent   bool      `json:"agent,omitempty"`
	Updated time.Time `json:"updated"`
}

// PutClusterState stores a cluster's state.
func (s *Store) PutClusterState(ctx context.Context, c ClusterRef, st ClusterState) error {
	return s.PutClusterStateOn(ctx, c, st, 0)
}

// PutClusterStateOn stores a cluster's state on a lease (0: none), so it
// goes when its writer's lease does: a cluster whose watcher died is not
// believed on that watcher's last word. It writes only if every guard
// holds (ErrGuard otherwise).
func (s *Store) PutClusterStateOn(ctx context.Context, c ClusterRef, st ClusterState, lease clientv3.LeaseID, guards ...clientv3.Cmp) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	resp, err := s.cli.Txn(ctx).If(guards...).Then(clientv3.OpPut(s.clusterKey(c), string(data), opts...)).Commit()
	if err != nil {
		return fmt.Errorf("store the state of cluster %s: %w", c, err)
	}
	if !resp.Succeeded {
		return ErrGuard
	}
	return nil
}

func (s *Store) clusterKey(c ClusterRef) string { return s.prefix + "/clusters/" + c.String() }

// ClusterState reads one cluster's state; false when none is stored.
func (s *Store) ClusterState(ctx context.Context, c ClusterRef) (ClusterState, bool, error) {
	var st ClusterState
	resp, err := s.cli.Get(ctx, s.clusterKey(c))
	if err != nil {
		return st, false, fmt.Errorf("read the state of cluster %s: %w", c, err)
	}
	if len(resp.Kvs) == 0 {
		return st, false, nil
	}
	return st, true, json.Unmarshal(resp.Kvs[0].Value, &st)
}

// ClusterStates returns every cluster's state with one range read.
func (s *Store) ClusterStates(ctx context.Context) (map[ClusterRef]ClusterState, error) {
	resp, err := s.cli.Get(ctx, s.prefix+"/clusters/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read cluster states: %w", err)
	}
	out := make(map[ClusterRef]ClusterState, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ref, err := ParseClusterRef(strings.TrimPrefix(string(kv.Key), s.prefix+"/clusters/"))
		if err != nil {
			continue
		}
		var st ClusterState
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			return nil, fmt.Errorf("cluster state %s: %w", ref, err)
		}
		out[ref] = st
	}
	return out, nil
}

// StatusPrefix is the key prefix of context statuses; a watch on it sees
// every context lifecycle change.
func (s *Store) StatusPrefix() string { return s.prefix + "/status/" }

// Prefix is the prefix of every key the store writes (no trailing '/'):
// others keep their own keys beside it (rsync's action records).
func (s *Store) Prefix() string { return s.prefix }

// Client exposes the etcd client for watches.
func (s *Store) Client() *clientv3.Client { return s.cli }
