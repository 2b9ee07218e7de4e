package appcontext

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/errdefs"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
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

// Per-resource rsync statuses. Retrying, Waiting and Failed are the three
// classes of error (docs/status.md): Retrying is transient (the cluster is
// unreachable, overloaded or timing out; retried with backoff), Waiting
// needs something the cluster does not have yet (a kind, a namespace;
// retried as soon as the cluster's API changes), Failed is what the API
// server refused (retried on the next update).
const (
	RsyncPending  = "Pending"
	RsyncApplied  = "Applied"
	RsyncFailed   = "Failed"
	RsyncRetrying = "Retrying"
	RsyncWaiting  = "Waiting"
	RsyncDeleted  = "Deleted"
)

// V1Provider is the provider name under which a v1 cloud region is a
// cluster. It starts with "_", which no v2 provider name may, so the two
// never clash.
const V1Provider = "_v1"

// Field validation modes: how rsync has API servers treat fields a kind's
// schema lacks. Warn (the default, as Helm and EMCO get) drops them and
// records a warning; Ignore drops them silently; Strict fails the object.
const (
	FieldValidationStrict = "Strict"
	FieldValidationWarn   = "Warn"
	FieldValidationIgnore = "Ignore"
)

// ValidFieldValidation reports whether v is a mode ("" means the default).
func ValidFieldValidation(v string) bool {
	switch v {
	case "", FieldValidationStrict, FieldValidationWarn, FieldValidationIgnore:
		return true
	}
	return false
}

// Meta describes a context; it is written once, and again by each update
// (its revision, dependencies and field validation mode).
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
	// FieldValidation is how the API servers treat fields their schema
	// lacks: Strict, Warn or Ignore; "" is rsync's default.
	FieldValidation string `json:"fieldValidation,omitempty"`
	// Revision is the revision of the desired state the context holds
	// (1 for its instantiation; each update or rollback makes the next).
	Revision int64 `json:"revision,omitempty"`
	// Dependencies order the apps: by app, what it waits for on each
	// cluster before rsync applies it (and, reversed, what goes first on
	// terminate).
	Dependencies map[string][]Dependency `json:"dependencies,omitempty"`
	// SyncPolicy is the group's drift policy (the DIG's spec.syncPolicy,
	// the instance's sync-policy), kept current by a PUT of the DIG.
	SyncPolicy SyncPolicy `json:"syncPolicy,omitzero"`
}

// SyncPolicy says what Argus does about drift and about objects it finds in
// its way.
type SyncPolicy struct {
	// SelfHeal re-applies what drifted (OutOfSync or Missing) without
	// being asked, after a short delay and with backoff.
	SelfHeal bool `json:"selfHeal,omitempty"`
	// Adopt lets rsync take over an existing object it does not own, when
	// the object itself also says it may be (annotation argus.io/adopt:
	// "true"); without both, such an object is refused.
	Adopt bool `json:"adopt,omitempty"`
}

// Dependency makes an app wait until another reached OpStatus (Deployed:
// every resource Applied; Ready: every resource Ready as the cluster
// reports it) on the same cluster, or on every cluster it is placed on
// when it is not placed on that one, and then Wait more.
type Dependency struct {
	App      string        `json:"app"`
	OpStatus string        `json:"opStatus"`
	Wait     time.Duration `json:"wait,omitempty"`
}

// Dependency operational states.
const (
	OpStatusDeployed = "Deployed"
	OpStatusReady    = "Ready"
)

// Status is a context's lifecycle state.
type Status struct {
	Status string `json:"status"`
	// Error summarises what went wrong ("2 of 9 resources failed, 1 is
	// waiting"); Reasons are the first resources' reasons.
	Error   string   `json:"error,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	// Active is set while rsync still works on a context whose status is
	// already a failure (resources waiting or retrying besides those that
	// failed), so a restart resumes it.
	Active  bool      `json:"active,omitempty"`
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
	// It is stored by content (ManifestRef) and filled in when read.
	Manifest json.RawMessage `json:"manifest,omitempty"`
	// ManifestRef locates the stored manifest; set by the Store.
	ManifestRef *BlobRef `json:"manifestRef,omitempty"`
	// Order is the apply position within its app and cluster.
	Order int `json:"order"`
	// Removed marks a resource an update no longer renders: rsync deletes it.
	Removed bool `json:"removed,omitempty"`
	// Exclusive marks an object the placement must own: rsync creates it
	// and never takes over one that exists unless that one is the group's
	// (its argus.io/owner annotation names the group, or it carries this
	// context's label), never deletes another's, and applies nothing of
	// the placement after it while it is not applied. A logical cloud's
	// namespace is one: its roles must never land in a namespace someone
	// else made, nor its terminate delete one.
	Exclusive bool `json:"exclusive,omitempty"`
	// Hook, when set, makes the resource a Helm hook: rsync applies it
	// only at its events, not with the app's resources.
	Hook *Hook `json:"hook,omitempty"`
}

// Helm hook events rsync runs, as EMCO's rsync does (the upgrade and
// rollback ones are kept, never run).
const (
	HookPreInstall  = "pre-install"
	HookPostInstall = "post-install"
	HookPreDelete   = "pre-delete"
	HookPostDelete  = "post-delete"
)

// Helm hook delete policies; with none, before-hook-creation applies.
const (
	HookBeforeCreation = "before-hook-creation"
	HookSucceeded      = "hook-succeeded"
	HookFailed         = "hook-failed"
)

// Hook is a Helm hook's annotations: the events it runs at, its order
// among them (lower weight first) and when it is deleted.
type Hook struct {
	Events         []string `json:"events"`
	Weight         int      `json:"weight,omitempty"`
	DeletePolicies []string `json:"deletePolicies,omitempty"`
}

// At reports whether the hook runs at event.
func (h *Hook) At(event string) bool {
	return h != nil && slices.Contains(h.Events, event)
}

// Deletes reports whether the hook is deleted under policy;
// before-hook-creation is Helm's default when none is given.
func (h *Hook) Deletes(policy string) bool {
	if h == nil {
		return false
	}
	if len(h.DeletePolicies) == 0 {
		return policy == HookBeforeCreation
	}
	return slices.Contains(h.DeletePolicies, policy)
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
	Status string `json:"status"`
	// Error is the reason of a Failed, Waiting or Retrying resource.
	Error string `json:"error,omitempty"`
	// Warnings are what the API server said about an Applied object
	// (unknown fields dropped, deprecated APIs).
	Warnings []string `json:"warnings,omitempty"`
	// Manifest is the sha256 of the manifest last Applied: an update
	// applies only what changed.
	Manifest string `json:"manifest,omitempty"`
	// Fields is the hash of the fields Argus manages as the last apply
	// left them (syncstate.Hash of the API server's answer): what the
	// live object's hash is compared with to tell drift.
	Fields string `json:"fields,omitempty"`
	// Heal says how often sync or self-heal re-applied the resource; kept
	// across later applies of the context.
	Heal *Heal `json:"heal,omitempty"`
	// Adopted names who owned the object before rsync adopted it.
	Adopted  string    `json:"adopted,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Updated  time.Time `json:"updated"`
}

// Heal is a resource's record of being re-applied because it drifted.
type Heal struct {
	// Count is how many times it was healed.
	Count int `json:"count"`
	// Streak counts heals in a row that something on the cluster undid
	// soon after (an HPA, an operator): self-heal backs off by it.
	Streak int `json:"streak,omitempty"`
	// Last is when it was last healed, By whom ("sync" or "self-heal"),
	// and Was its sync state then (OutOfSync or Missing).
	Last time.Time `json:"last"`
	By   string    `json:"by"`
	Was  string    `json:"was"`
}

// HealStreakWindow: a heal within this long of the one before continues
// its streak (something on the cluster undid the last heal); a longer
// quiet starts over.
const HealStreakWindow = 10 * time.Minute

// Next is the record after one heal more, by by, of a resource that was in
// sync state was, at now.
func (h *Heal) Next(by, was string, now time.Time) *Heal {
	next := &Heal{Count: 1, Streak: 1, Last: now, By: by, Was: was}
	if h != nil {
		next.Count = h.Count + 1
		if now.Sub(h.Last) < HealStreakWindow {
			next.Streak = h.Streak + 1
		}
	}
	return next
}

// Healers: who asked for a heal.
const (
	HealBySync     = "sync"
	HealBySelfHeal = "self-heal"
)

// HealRequest is what a sync action re-applies: the resources that drifted
// when it was asked for. Stored at /ctx/<id>/heal until the action ends.
type HealRequest struct {
	By        string       `json:"by"`
	Requested time.Time    `json:"requested"`
	Targets   []HealTarget `json:"targets"`
}

// HealTarget is one resource to re-apply and the sync state it was in.
type HealTarget struct {
	App     string     `json:"app"`
	Cluster ClusterRef `json:"cluster"`
	// Key is the resource's Key(); GVK, Name and Namespace name it for
	// people.
	Key       string                  `json:"key"`
	GVK       schema.GroupVersionKind `json:"gvk"`
	Name      string                  `json:"name"`
	Namespace string                  `json:"namespace,omitempty"`
	Was       string                  `json:"was"`
	// Reason is why it is not Synced.
	Reason string `json:"reason,omitempty"`
}

// Drifted is a resource whose live object is not what was applied
// (OutOfSync or Missing), with its heal record and when it was applied.
type Drifted struct {
	HealTarget
	Heal    *Heal
	Applied time.Time
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
	// Rev counts the changes the cache applied to the placement, so a
	// reader that keeps what it derived from one (the status summary's
	// per-placement counts) knows when to derive it again.
	Rev uint64 `json:"-"`
}

// Context is everything stored for one context.
type Context struct {
	Meta   Meta
	Status Status
	// Placements are sorted by app, then Cluster.String() (Placement
	// searches them), and only grow, by insertion: status's memo takes a
	// list with the same first element and length for the same list.
	Placements []*Placement
	// Heal is the pending sync request, if any.
	Heal *HealRequest
}

// Placement returns the placement of app on cluster, or nil, by a binary
// search of the placements in their order (rsync asks once per placement
// it follows: a scan made a DIG on 10,000 clusters quadratic).
func (c *Context) Placement(app string, cluster ClusterRef) *Placement {
	i := placementAt(c.Placements, app, cluster)
	if i < len(c.Placements) && c.Placements[i].App == app && c.Placements[i].Cluster == cluster {
		return c.Placements[i]
	}
	return nil
}

// placementAt is where app's placement on ref is, or goes, in placements
// in a Context's order: by app, then Cluster.String().
func placementAt(placements []*Placement, app string, ref ClusterRef) int {
	key := ref.String()
	return sort.Search(len(placements), func(i int) bool {
		q := placements[i]
		return q.App > app || q.App == app && q.Cluster.String() >= key
	})
}

// Store reads and writes contexts in etcd.
type Store struct {
	cli    *clientv3.Client
	prefix string
	lim    limits
}

// Options configures a Store.
type Options struct {
	Client *clientv3.Client
	// Prefix for every key; "" means etcdstore.DefaultPrefix.
	Prefix string
	// MaxRequestBytes is etcd's --max-request-bytes; 0 means etcd's
	// default, 1.5 MiB. Values are chunked to a quarter of it and
	// transactions kept under half.
	MaxRequestBytes int
}

// New returns a Store.
func New(opts Options) *Store {
	return &Store{cli: opts.Client, prefix: etcdstore.Prefix(opts.Prefix), lim: newLimits(opts.MaxRequestBytes)}
}

func (s *Store) ctxPrefix(id string) string { return s.prefix + "/ctx/" + id + "/" }
func (s *Store) healKey(id string) string   { return s.ctxPrefix(id) + "heal" }
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
// resources, in transactions bounded in operations and bytes. Manifests
// are stored once per content (an app placed on many clusters costs one
// copy) and chunked below etcd's request limit. The meta key is written
// first and only if absent, so ids never collide.
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
	b := &batch{s: s}
	if err := s.putResources(b, meta.ID, placements, map[string]bool{}); err != nil {
		return err
	}
	// The status goes last: a context is Instantiating only once all of it
	// is stored.
	if err := s.putStatus(b, meta.ID, status); err != nil {
		return err
	}
	return b.commit(ctx)
}

// Replace writes the resources of placements into an existing context (for
// updates), its meta when not nil, and then its status: new and changed
// manifests are written; resources no longer rendered stay, marked Removed
// by the caller.
func (s *Store) Replace(ctx context.Context, id string, placements []*Placement, meta *Meta, status Status) error {
	have, err := s.blobs(ctx, id)
	if err != nil {
		return err
	}
	b := &batch{s: s}
	if meta != nil {
		data, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		b.put(s.metaKey(id), data)
	}
	if err := s.putResources(b, id, placements, have); err != nil {
		return err
	}
	if err := s.putStatus(b, id, status); err != nil {
		return err
	}
	return b.commit(ctx)
}

func (s *Store) putStatus(b *batch, id string, st Status) error {
	if st.Updated.IsZero() {
		st.Updated = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	b.put(s.statusKey(id), data)
	return nil
}

// PutHeal records a sync request for the context (replacing any).
func (s *Store) PutHeal(ctx context.Context, id string, req HealRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.healKey(id), string(data)); err != nil {
		return fmt.Errorf("record sync request of %s: %w", id, err)
	}
	return nil
}

// ClearHeal deletes the context's sync request once it is carried out,
// if every guard holds (ErrGuard otherwise).
func (s *Store) ClearHeal(ctx context.Context, id string, guards ...clientv3.Cmp) error {
	resp, err := s.cli.Txn(ctx).If(guards...).Then(clientv3.OpDelete(s.healKey(id))).Commit()
	if err != nil {
		return fmt.Errorf("clear sync request of %s: %w", id, err)
	}
	if !resp.Succeeded {
		return ErrGuard
	}
	return nil
}

// SetMeta rewrites a context's meta (its sync policy changed).
func (s *Store) SetMeta(ctx context.Context, meta Meta) error {
	data, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.metaKey(meta.ID), string(data)); err != nil {
		return fmt.Errorf("record context %s: %w", meta.ID, err)
	}
	return nil
}

// SetStatus records a context's status, if every guard holds (ErrGuard
// otherwise).
func (s *Store) SetStatus(ctx context.Context, id string, st Status, guards ...clientv3.Cmp) error {
	b := &batch{s: s, guards: guards}
	if err := s.putStatus(b, id, st); err != nil {
		return err
	}
	return b.commit(ctx)
}

// StatusUpdate is one resource's new rsync state.
type StatusUpdate struct {
	App     string
	Cluster ClusterRef
	Key     string
	Status  ResourceStatus
}

// SetResourceStatuses records many resources' states, and then the
// context's status when ctxStatus is not nil, in as few transactions as
// etcd's limits allow, each only if every guard holds (ErrGuard
// otherwise: the transactions before it were written).
func (s *Store) SetResourceStatuses(ctx context.Context, id string, updates []StatusUpdate, ctxStatus *Status, guards ...clientv3.Cmp) error {
	b := &batch{s: s, guards: guards}
	now := time.Now().UTC()
	for _, u := range updates {
		key, data, err := s.statusPut(id, u, now)
		if err != nil {
			return err
		}
		b.put(key, data)
	}
	if ctxStatus != nil {
		if err := s.putStatus(b, id, *ctxStatus); err != nil {
			return err
		}
	}
	return b.commit(ctx)
}

// Get reads a whole context in one transaction (meta, status, and a range
// read of its resources) at a single revision.
func (s *Store) Get(ctx context.Context, id string) (*Context, error) {
	return s.get(ctx, id, newBuilder(), s.ctxPrefix(id))
}

// GetWithoutManifests reads a context as Get does, but not its manifests:
// each resource has its ManifestRef alone, for Manifests to load when it
// is needed. What a reader holds then does not grow with what was
// rendered. Its bundle snapshots keep Parsed, not the raw Status.
func (s *Store) GetWithoutManifests(ctx context.Context, id string) (*Context, error) {
	return s.get(ctx, id, newLeanBuilder(), s.ctxPrefix(id)+"app/")
}

// Placed reads which apps a context places on which clusters, and its
// status id, from the keys alone: what a cluster's watcher needs, without
// the values a whole read carries (a context on 10,000 clusters is
// 110,000 keys and 33 MB, read by every replica each time its status
// changes).
func (s *Store) Placed(ctx context.Context, id string) (statusID string, placed map[ClusterRef]map[string]bool, err error) {
	prefix := s.ctxPrefix(id)
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.metaKey(id)),
		clientv3.OpGet(prefix+"app/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return "", nil, fmt.Errorf("read context %s: %w", id, err)
	}
	metaKVs := resp.Responses[0].GetResponseRange().Kvs
	if len(metaKVs) == 0 {
		return "", nil, errdefs.NotFound("context %s not found", id)
	}
	var m Meta
	if err := json.Unmarshal(metaKVs[0].Value, &m); err != nil {
		return "", nil, fmt.Errorf("context %s: meta: %w", id, err)
	}
	placed = map[ClusterRef]map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		app, ref, _, ok := placementKey(strings.TrimPrefix(string(kv.Key), prefix))
		if !ok {
			continue
		}
		if placed[ref] == nil {
			placed[ref] = map[string]bool{}
		}
		placed[ref][app] = true
	}
	return m.StatusID, placed, nil
}

func (s *Store) get(ctx context.Context, id string, b *builder, ranged string) (*Context, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.metaKey(id)),
		clientv3.OpGet(s.statusKey(id)),
		clientv3.OpGet(ranged, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read context %s: %w", id, err)
	}
	metaKVs := resp.Responses[0].GetResponseRange().Kvs
	if len(metaKVs) == 0 {
		return nil, errdefs.NotFound("context %s not found", id)
	}
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
	b.resolve()
	if b.unresolved {
		return nil, fmt.Errorf("context %s: a manifest's stored chunks are incomplete", id)
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
