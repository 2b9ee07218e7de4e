package appcontext

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Context statuses (SPEC section 4).
const (
	Instantiating     = "Instantiating"
	Instantiated      = "Instantiated"
	InstantiateFailed = "InstantiateFailed"
	Terminating       = "Terminating"
	Terminated        = "Terminated"
	TerminateFailed   = "TerminateFailed"
	Updating          = "Updating"
	Updated           = "Updated"
	UpdateFailed      = "UpdateFailed"
)

// Per-resource rsync statuses.
const (
	RsyncPending  = "Pending"
	RsyncApplied  = "Applied"
	RsyncFailed   = "Failed"
	RsyncRetrying = "Retrying"
	RsyncDeleted  = "Deleted"
)

// V1Provider is the provider name under which a v1 cloud region is a
// cluster. It starts with "_", which no v2 provider name may, so the two
// never clash.
const V1Provider = "_v1"

// Meta describes a context; it is written once.
type Meta struct {
	ID string `json:"id"`
	// Kind is "dig", "instance" or "network".
	Kind string `json:"kind"`
	// Group identifies what the context belongs to (a DIG's or instance's
	// key); actions on one group are serialised.
	Group            string `json:"group"`
	Project          string `json:"project,omitempty"`
	CompositeApp     string `json:"compositeApp,omitempty"`
	Version          string `json:"compositeAppVersion,omitempty"`
	DIG              string `json:"dig,omitempty"`
	CompositeProfile string `json:"compositeProfile,omitempty"`
	// LogicalCloud names the project's logical cloud whose credentials
	// apply the resources; "" means the clusters' own (admin) credentials.
	LogicalCloud string `json:"logicalCloud,omitempty"`
	Namespace    string `json:"namespace"`
	// StatusID labels the cluster objects: the id of the group's first
	// instantiation, kept across updates so pods are not relabelled.
	StatusID string    `json:"statusId"`
	Created  time.Time `json:"created"`
}

// Status is a context's lifecycle state.
type Status struct {
	Status  string    `json:"status"`
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// ClusterRef names a cluster as "<provider>+<cluster>".
type ClusterRef struct {
	Provider string `json:"clusterProvider"`
	Name     string `json:"cluster"`
}

func (c ClusterRef) String() string { return c.Provider + "+" + c.Name }

// ParseClusterRef parses "<provider>+<cluster>".
func ParseClusterRef(s string) (ClusterRef, error) {
	p, c, ok := strings.Cut(s, "+")
	if !ok || p == "" || c == "" || strings.Contains(c, "+") {
		return ClusterRef{}, errdefs.Invalid("cluster %q: want <provider>+<cluster>", s)
	}
	return ClusterRef{Provider: p, Name: c}, nil
}

// Resource is one rendered object for one app on one cluster.
type Resource struct {
	GVK       schema.GroupVersionKind `json:"gvk"`
	Name      string                  `json:"name"`
	Namespace string                  `json:"namespace,omitempty"`
	// Manifest is the object as rendered (JSON), before rsync's labels.
	Manifest json.RawMessage `json:"manifest"`
	// Order is the apply position within its app and cluster.
	Order int `json:"order"`
	// Removed marks a resource an update no longer renders: rsync deletes it.
	Removed bool `json:"removed,omitempty"`
}

// Key identifies a resource within an app and cluster.
func (r Resource) Key() string {
	ns := r.Namespace
	if ns == "" {
		ns = "_"
	}
	return r.GVK.Kind + "/" + ns + "/" + r.Name
}

// ResourceStatus is rsync's state of one resource.
type ResourceStatus struct {
	Status   string    `json:"status"`
	Error    string    `json:"error,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Updated  time.Time `json:"updated"`
}

// Placement is the resources of one app on one cluster.
type Placement struct {
	App       string
	Cluster   ClusterRef
	Resources []Resource
	// Statuses by Resource.Key(); a resource without one is Pending.
	Statuses map[string]ResourceStatus
	// Bundle is the last ResourceBundleState received; nil if none yet.
	Bundle *BundleSnapshot
}

// Context is everything stored for one context.
type Context struct {
	Meta       Meta
	Status     Status
	Placements []*Placement // sorted by app, then cluster
}

// Placement returns the placement of app on cluster, or nil.
func (c *Context) Placement(app string, cluster ClusterRef) *Placement {
	for _, p := range c.Placements {
		if p.App == app && p.Cluster == cluster {
			return p
		}
	}
	return nil
}

// Store reads and writes contexts in etcd.
type Store struct {
	cli    *clientv3.Client
	prefix string
}

// Options configures a Store.
type Options struct {
	Client *clientv3.Client
	// Prefix for every key; "" means "/argus".
	Prefix string
}

// New returns a Store.
func New(opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "/argus"
	}
	return &Store{cli: opts.Client, prefix: strings.TrimSuffix(opts.Prefix, "/")}
}

func (s *Store) ctxPrefix(id string) string { return s.prefix + "/ctx/" + id + "/" }
func (s *Store) metaKey(id string) string   { return s.prefix + "/meta/" + id }
func (s *Store) statusKey(id string) string { return s.prefix + "/status/" + id }

func (s *Store) resPrefix(id, app string, c ClusterRef) string {
	return s.ctxPrefix(id) + "app/" + app + "/cluster/" + c.String() + "/res/"
}

// NewID returns a fresh context id: a decimal uint64 (63 bits, so it also
// fits a signed integer), never 0.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.BigEndian.Uint64(b[:])>>1|1, 10)
}

// maxOps keeps each transaction under etcd's default --max-txn-ops (128).
const maxOps = 100

// Create stores a new context: its meta, a status, and every placement's
// manifests, in transactions of at most maxOps puts. The meta key is
// written first and only if absent, so ids never collide.
func (s *Store) Create(ctx context.Context, meta Meta, status Status, placements []*Placement) error {
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	metaKey := s.metaKey(meta.ID)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(metaKey), "=", 0)).
		Then(clientv3.OpPut(metaKey, string(metaJSON))).Commit()
	if err != nil {
		return fmt.Errorf("create context %s: %w", meta.ID, err)
	}
	if !resp.Succeeded {
		return errdefs.Conflict("context %s already exists", meta.ID)
	}
	ops := []clientv3.Op{}
	st, err := json.Marshal(status)
	if err != nil {
		return err
	}
	ops = append(ops, clientv3.OpPut(s.statusKey(meta.ID), string(st)))
	for _, p := range placements {
		for i, r := range p.Resources {
			r.Order = i
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(s.resPrefix(meta.ID, p.App, p.Cluster)+r.Key()+"/manifest", string(data)))
		}
	}
	return s.commit(ctx, ops)
}

func (s *Store) commit(ctx context.Context, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), maxOps)
		if _, err := s.cli.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("write context: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// ReplacePlacement sets the resources of an app on a cluster (for updates):
// new and changed manifests are written; manifests no longer rendered stay,
// marked for deletion by the caller through their status.
func (s *Store) ReplacePlacement(ctx context.Context, id string, p *Placement) error {
	var ops []clientv3.Op
	for i, r := range p.Resources {
		r.Order = i
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(s.resPrefix(id, p.App, p.Cluster)+r.Key()+"/manifest", string(data)))
	}
	return s.commit(ctx, ops)
}

// SetStatus records a context's status.
func (s *Store) SetStatus(ctx context.Context, id string, st Status) error {
	if st.Updated.IsZero() {
		st.Updated = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, s.statusKey(id), string(data))
	return err
}

// SetResourceStatus records rsync's state of one resource.
func (s *Store) SetResourceStatus(ctx context.Context, id, app string, c ClusterRef, key string, st ResourceStatus) error {
	if st.Updated.IsZero() {
		st.Updated = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, s.resPrefix(id, app, c)+key+"/status", string(data))
	return err
}

// Get reads a whole context in one transaction (meta, status, and a range
// read of its resources) at a single revision.
func (s *Store) Get(ctx context.Context, id string) (*Context, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.metaKey(id)),
		clientv3.OpGet(s.statusKey(id)),
		clientv3.OpGet(s.ctxPrefix(id), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read context %s: %w", id, err)
	}
	metaKVs := resp.Responses[0].GetResponseRange().Kvs
	if len(metaKVs) == 0 {
		return nil, errdefs.NotFound("context %s not found", id)
	}
	b := newBuilder()
	if err := b.applyMeta(metaKVs[0].Value); err != nil {
		return nil, fmt.Errorf("context %s: %w", id, err)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := b.applyStatus(kvs[0].Value); err != nil {
			return nil, fmt.Errorf("context %s: %w", id, err)
		}
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if err := b.applyPlacementKey(strings.TrimPrefix(string(kv.Key), s.ctxPrefix(id)), kv.Value, false); err != nil {
			return nil, fmt.Errorf("context %s: %w", id, err)
		}
	}
	return b.ctx, nil
}

// StatusOf returns a resource's status, Pending when none was recorded.
func (p *Placement) StatusOf(key string) ResourceStatus {
	if st, ok := p.Statuses[key]; ok {
		return st
	}
	return ResourceStatus{Status: RsyncPending}
}

// Summary is a context's meta and status, for listing.
type Summary struct {
	Meta   Meta
	Status Status
}

// List returns every context's meta and status with two range reads in one
// transaction; resources are not read.
func (s *Store) List(ctx context.Context) ([]Summary, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.prefix+"/meta/", clientv3.WithPrefix()),
		clientv3.OpGet(s.prefix+"/status/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("list contexts: %w", err)
	}
	byID := map[string]*Summary{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var m Meta
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("context meta %s: %w", kv.Key, err)
		}
		byID[m.ID] = &Summary{Meta: m}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		id := strings.TrimPrefix(string(kv.Key), s.prefix+"/status/")
		if sm := byID[id]; sm != nil {
			if err := json.Unmarshal(kv.Value, &sm.Status); err != nil {
				return nil, fmt.Errorf("context status %s: %w", id, err)
			}
		}
	}
	out := make([]Summary, 0, len(byID))
	for _, sm := range byID {
		out = append(out, *sm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta.Created.Before(out[j].Meta.Created) })
	return out, nil
}
