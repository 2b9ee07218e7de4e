package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/status"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// State is a subscription's durable delivery state. Its etcd layout keeps
// a change's writes in proportion to what changed, never to the subject:
//
//	<prefix><key>                        the state (sequence, times, pending payload)
//	<prefix>delivered/<key>/<shard>      the delivered digests of one cluster
//	<prefix>frozen/<key>/<seq>/<part>/<n> a large part of the pending payload (frozen.go)
//
// One value for the whole state passed etcd's request limit near 5,000
// resources (a DIG on 1,000 clusters), and every change rewrote all of it.
type State struct {
	// Sequence is the last sequence number given to a payload.
	Sequence int64 `json:"sequence"`
	// Delivered are the digests of the last state the subscriber received:
	// deltas are computed against it, never against an unsent one. The
	// worker keeps them in memory; etcd has them one value per cluster.
	Delivered map[string]string `json:"-"`
	// Pending is the frozen payload awaiting a 2xx, resent unchanged.
	Pending *Pending `json:"pending,omitempty"`

	// Created is when the subscription took its first baseline.
	Created    time.Time `json:"created,omitzero"`
	LastUpdate time.Time `json:"lastUpdate,omitzero"`
	LastNotify time.Time `json:"lastNotify,omitzero"`
	LastStatus string    `json:"lastStatus,omitempty"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"lastError,omitempty"`
	// Target is where a sink delivers (the AAI tenant URL), kept so work
	// for a deleted subject can still be finished.
	Target string `json:"target,omitempty"`
	// Head is the digest of the envelope's own fields (a DIG's lifecycle
	// status and readiness) last delivered: a change there is a change
	// even when no resource changed.
	Head string `json:"head,omitempty"`
	// Rebaseline asks the next worker to take the current state as
	// delivered (filters changed) while the sequence carries on.
	Rebaseline bool `json:"rebaseline,omitempty"`
	// Gen is the generation of the subscription (its marker in etcd) whose
	// reset this state already took, so a reset is applied once even when
	// the subscription changes hands meanwhile.
	Gen string `json:"gen,omitempty"`
	// LegacyDelivered is where earlier versions kept Delivered (in this
	// value): read, and written back only until the shards have them.
	LegacyDelivered map[string]string `json:"delivered,omitempty"`

	// legacy: Delivered came from LegacyDelivered and no shard has it yet.
	legacy bool
	// byShard indexes Delivered's keys by shard (shardOf), so a delivery
	// writes the shards it touched without looking at every delivered key
	// (indexShards; nil until then, and after Delivered is replaced).
	byShard map[string]map[string]struct{}
}

// indexShards builds byShard, once.
func (st *State) indexShards() {
	if st.byShard != nil {
		return
	}
	st.byShard = map[string]map[string]struct{}{}
	for k := range st.Delivered {
		st.index(k, false)
	}
}

func (st *State) index(key string, remove bool) {
	sh := shardOf(key)
	m := st.byShard[sh]
	if remove {
		delete(m, key)
		if len(m) == 0 {
			delete(st.byShard, sh)
		}
		return
	}
	if m == nil {
		m = map[string]struct{}{}
		st.byShard[sh] = m
	}
	m[key] = struct{}{}
}

// shards are the delivered digests of the shards want names (all of
// them when all is set), by shard: from the index when it is built.
func (st *State) shards(want map[string]bool, all bool) map[string]map[string]string {
	shards := map[string]map[string]string{}
	put := func(sh, k, d string) {
		if shards[sh] == nil {
			shards[sh] = map[string]string{}
		}
		shards[sh][k] = d
	}
	if !all && st.byShard != nil {
		for sh := range want {
			for k := range st.byShard[sh] {
				put(sh, k, st.Delivered[k])
			}
		}
		return shards
	}
	for k, d := range st.Delivered {
		if sh := shardOf(k); all || want[sh] {
			put(sh, k, d)
		}
	}
	return shards
}

// delivered moves Delivered (and its index) to where p brings the
// subscriber.
func (st *State) delivered(p *Pending) {
	st.Delivered = p.apply(st.Delivered)
	if st.byShard == nil {
		return
	}
	for k := range p.Delta {
		st.index(k, false)
	}
	for _, k := range p.Gone {
		st.index(k, true)
	}
}

// Pending is one frozen delivery and the digests it brings the subscriber to.
type Pending struct {
	ID        string    `json:"id"`
	Sequence  int64     `json:"sequence"`
	Timestamp time.Time `json:"timestamp"`
	// ChangedAt is when the first change it carries was seen, for the
	// change-to-delivery latency.
	ChangedAt time.Time `json:"changedAt,omitzero"`
	// Changes is the frozen {"resource-changes": …} part of the payload.
	Changes json.RawMessage `json:"changes,omitempty"`
	// Envelope is the rest of the payload (the status answer). Either
	// part is kept in the state value up to MaxInlinePart bytes; a larger
	// one (a big DIG's output=all answer, a first delivery of thousands of
	// resources) is kept compressed under keys of its own (frozen.go),
	// which its ref names, so a resumed delivery resends the payload
	// unchanged whatever its size. Load leaves such a part out; the worker
	// that resumes the delivery reads it back (States.thaw).
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// EnvelopeRef and ChangesRef name a part kept under keys of its own.
	EnvelopeRef *FrozenRef `json:"envelopeRef,omitempty"`
	ChangesRef  *FrozenRef `json:"changesRef,omitempty"`
	// DeltaRef names Delta and Gone kept under keys of their own (a first
	// delivery of a DIG's tens of thousands of resources).
	DeltaRef *FrozenRef `json:"deltaRef,omitempty"`
	// Delta are the digests of the resources this payload changes, and
	// Gone the resources it deletes: the delivered state once it is
	// answered, less what did not change.
	Delta    map[string]string `json:"delta,omitempty"`
	Gone     []string          `json:"gone,omitempty"`
	NextHead string            `json:"nextHead,omitempty"`
	// Body and Next are a payload frozen by an earlier version (the whole
	// payload and every digest): read and resent, never written anew.
	Body json.RawMessage   `json:"body,omitempty"`
	Next map[string]string `json:"next,omitempty"`
}

// MaxInlinePart bounds a part of a pending payload kept in the state's
// own value; a larger part has keys of its own.
const MaxInlinePart = 64 << 10

// payload is the body to POST.
func (p *Pending) payload() ([]byte, error) {
	if p.Body != nil {
		return p.Body, nil
	}
	if (p.EnvelopeRef != nil && p.Envelope == nil) || (p.ChangesRef != nil && p.Changes == nil) {
		return nil, errors.New("notify: a part of the pending payload was not read back")
	}
	env := p.Envelope
	if env == nil {
		env = []byte("{}")
	}
	return mergeObjects(env, p.Changes)
}

// touched are the keys whose delivered digests the payload changes.
func (p *Pending) touched() []string {
	out := make([]string, 0, len(p.Delta)+len(p.Gone))
	for k := range p.Delta {
		out = append(out, k)
	}
	return append(out, p.Gone...)
}

// apply moves delivered to where the payload brings the subscriber.
func (p *Pending) apply(delivered map[string]string) map[string]string {
	if delivered == nil {
		delivered = map[string]string{}
	}
	for k, d := range p.Delta {
		delivered[k] = d
	}
	for _, k := range p.Gone {
		delete(delivered, k)
	}
	return delivered
}

// deltaOf is what changed from last to next.
func deltaOf(last, next map[string]string) (map[string]string, []string) {
	delta := map[string]string{}
	for k, d := range next {
		if prev, ok := last[k]; !ok || prev != d {
			delta[k] = d
		}
	}
	var gone []string
	for k := range last {
		if _, ok := next[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	return delta, gone
}

// States keeps delivery states in etcd under a prefix, so a restart resumes
// every pending delivery.
type States struct {
	cli    *clientv3.Client
	prefix string
}

// NewStates returns a state store; prefix "" means
// etcdstore.DefaultPrefix + "/notify/".
func NewStates(cli *clientv3.Client, prefix string) *States {
	if prefix == "" {
		prefix = etcdstore.DefaultPrefix + "/notify/"
	}
	return &States{cli: cli, prefix: prefix}
}

// shardsRoot holds the delivered digests; no state key starts with it.
const shardsRoot = "delivered/"

func (s *States) shardPrefix(key string) string { return s.prefix + shardsRoot + key + "/" }

// shardOf is the cluster a resource key names; keys of another shape
// share one shard.
func shardOf(key string) string { return status.KeyCluster(key) }

// Load returns a subscription's state and whether it existed, with its
// delivered digests, read at one revision.
func (s *States) Load(ctx context.Context, key string) (State, bool, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.prefix+key), clientv3.OpGet(s.shardPrefix(key), clientv3.WithPrefix())).Commit()
	if err != nil {
		return State{}, false, fmt.Errorf("load delivery state: %w", err)
	}
	meta, shards := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(meta) == 0 {
		return State{}, false, nil
	}
	st, err := decodeState(key, meta[0].Value)
	if err != nil {
		return State{}, false, err
	}
	if st.legacy {
		return st, true, nil
	}
	st.Delivered = map[string]string{}
	for _, kv := range shards {
		var m map[string]string
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return State{}, false, fmt.Errorf("delivered digests %s: %w", kv.Key, err)
		}
		for k, d := range m {
			st.Delivered[k] = d
		}
	}
	return st, true, nil
}

// LoadView returns a subscription's state without its delivered digests
// (what a GET shows), and whether it existed.
func (s *States) LoadView(ctx context.Context, key string) (State, bool, error) {
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return State{}, false, fmt.Errorf("load delivery state: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return State{}, false, nil
	}
	st, err := decodeState(key, resp.Kvs[0].Value)
	st.Delivered, st.legacy = nil, false
	return st, err == nil, err
}

// decodeState reads a state value, taking an earlier version's layout
// (every digest inline) as it comes.
func decodeState(key string, data []byte) (State, error) {
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, fmt.Errorf("delivery state of %s: %w", key, err)
	}
	if st.LegacyDelivered != nil {
		st.Delivered, st.LegacyDelivered, st.legacy = st.LegacyDelivered, nil, true
	}
	if p := st.Pending; p != nil && p.Next != nil && p.Delta == nil {
		p.Delta, p.Gone = deltaOf(st.Delivered, p.Next)
		p.Next = nil
	}
	return st, nil
}

// encode is the state's own value: parts kept under keys of their own
// are left out, and digests not yet in shards stay inline.
func (st State) encode() ([]byte, error) {
	if p := st.Pending; p.frozen() {
		cp := *p
		if cp.EnvelopeRef != nil {
			cp.Envelope = nil
		}
		if cp.ChangesRef != nil {
			cp.Changes = nil
		}
		if cp.DeltaRef != nil {
			cp.Delta, cp.Gone = nil, nil
		}
		st.Pending = &cp
	}
	if st.legacy {
		st.LegacyDelivered = st.Delivered
	}
	return json.Marshal(st)
}

// Save stores a subscription's state (not its delivered digests).
func (s *States) Save(ctx context.Context, key string, st State) error {
	return s.SaveIf(ctx, key, st)
}

// ErrNotOwner is a guarded save refused because this process no longer
// owns the subscription: another replica delivers it now.
var ErrNotOwner = errors.New("notify: the subscription belongs to another replica now")

// SaveIf stores a subscription's state, not its delivered digests, if
// every guard holds (the claim that makes this replica the
// subscription's owner), else ErrNotOwner.
func (s *States) SaveIf(ctx context.Context, key string, st State, guards ...clientv3.Cmp) error {
	if err := s.spill(ctx, key, st.Pending, guards); err != nil {
		return err
	}
	data, err := st.encode()
	if err != nil {
		return err
	}
	ops := append([]clientv3.Op{clientv3.OpPut(s.prefix+key, string(data))}, s.dropOthers(key, st.Pending)...)
	return s.commit(ctx, guards, ops...)
}

func (s *States) commit(ctx context.Context, guards []clientv3.Cmp, ops ...clientv3.Op) error {
	resp, err := s.cli.Txn(ctx).If(guards...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("save delivery state: %w", err)
	}
	if !resp.Succeeded {
		return ErrNotOwner
	}
	return nil
}

// Bounds of one write: etcd refuses a transaction of more than 128
// operations or 1.5 MiB (its defaults).
const (
	maxTxnOps   = 100
	maxTxnBytes = 1 << 20
)

// saveDelivered stores the state and the delivered digests of the clusters
// that touched names (every cluster's, replacing all, when all is set).
// The digests go first, in as many transactions as they need, and the
// state last: a process that stops in between leaves its pending payload
// to be resent (a repeat, never a gap) and applied again.
func (s *States) saveDelivered(ctx context.Context, key string, st State, touched []string, all bool, guards []clientv3.Cmp) error {
	if err := s.spill(ctx, key, st.Pending, guards); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, k := range touched {
		want[shardOf(k)] = true
	}
	shards := st.shards(want, all)
	if all {
		if err := s.commit(ctx, guards, clientv3.OpDelete(s.shardPrefix(key), clientv3.WithPrefix())); err != nil {
			return err
		}
	}
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := s.commit(ctx, guards, ops...)
		ops, size = nil, 0
		return err
	}
	add := func(op clientv3.Op, n int) error {
		if len(ops) >= maxTxnOps || size+n > maxTxnBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		ops, size = append(ops, op), size+n
		return nil
	}
	for sh := range want {
		if shards[sh] == nil && !all {
			if err := add(clientv3.OpDelete(s.shardPrefix(key)+sh), 0); err != nil {
				return err
			}
		}
	}
	for sh, m := range shards {
		data, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := add(clientv3.OpPut(s.shardPrefix(key)+sh, string(data)), len(data)+len(sh)); err != nil {
			return err
		}
	}
	st.legacy = false
	data, err := st.encode()
	if err != nil {
		return err
	}
	if err := add(clientv3.OpPut(s.prefix+key, string(data)), len(data)); err != nil {
		return err
	}
	ops = append(ops, s.dropOthers(key, st.Pending)...) // with the state that names what stays
	return flush()
}

// Delete removes a subscription's state.
func (s *States) Delete(ctx context.Context, key string) error {
	_, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.prefix+key), clientv3.OpDelete(s.shardPrefix(key), clientv3.WithPrefix()),
		s.dropFrozen(key)).Commit()
	return err
}

// LoadPrefix returns the states whose keys start with prefix, by key,
// without their delivered digests.
func (s *States) LoadPrefix(ctx context.Context, prefix string) (map[string]State, error) {
	resp, err := s.cli.Get(ctx, s.prefix+prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("load delivery states: %w", err)
	}
	out := make(map[string]State, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), s.prefix)
		st, err := decodeState(key, kv.Value)
		if err != nil {
			return nil, err
		}
		st.Delivered, st.legacy = nil, false
		out[key] = st
	}
	return out, nil
}

// DeletePrefix removes the states whose keys start with prefix.
func (s *States) DeletePrefix(ctx context.Context, prefix string) error {
	_, err := s.cli.Txn(ctx).Then(clientv3.OpDelete(s.prefix+prefix, clientv3.WithPrefix()),
		clientv3.OpDelete(s.prefix+shardsRoot+prefix, clientv3.WithPrefix()),
		clientv3.OpDelete(s.prefix+frozenRoot+prefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("delete delivery states: %w", err)
	}
	return nil
}
