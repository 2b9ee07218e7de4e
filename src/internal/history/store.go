package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/status"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// DefaultLimit is how many entries a subject keeps by default.
const DefaultLimit = 1000

// maxOps keeps each transaction under etcd's default --max-txn-ops (128):
// entries, as many cluster records at most (an entry touches one), the
// cursor and the trim.
const maxOps = 60

// Store keeps each subject's entries and cursor in etcd:
//
//	<prefix>/history/<group>/cursor      the last recorded state, but its resources
//	<prefix>/history/<group>/r/<cluster> the last recorded views of one cluster's resources
//	<prefix>/history/<group>/e/<seq>     one entry, seq zero-padded
//
// The cursor's resources are split by cluster so that recording a change
// writes the clusters it touched, not every resource of the subject (one
// value for a DIG on 1,000 clusters was about 500 KB, rewritten per change).
// Entries beyond the newest Limit are deleted in the transaction that
// appends, so a subject never holds more.
type Store struct {
	cli    *clientv3.Client
	prefix string
	limit  int64
}

// StoreOptions configures a Store. Client is required.
type StoreOptions struct {
	Client *clientv3.Client
	// Prefix of every key; "" means etcdstore.DefaultPrefix.
	Prefix string
	// Limit is the entries kept per subject; 0 means DefaultLimit.
	Limit int
}

// NewStore returns a Store.
func NewStore(opts StoreOptions) *Store {
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	return &Store{cli: opts.Client, prefix: etcdstore.Prefix(opts.Prefix) + "/history/", limit: int64(opts.Limit)}
}

func (s *Store) groupPrefix(group string) string { return s.prefix + group + "/" }
func (s *Store) cursorKey(group string) string   { return s.groupPrefix(group) + "cursor" }
func (s *Store) entriesPrefix(group string) string {
	return s.groupPrefix(group) + "e/"
}
func (s *Store) clustersPrefix(group string) string { return s.groupPrefix(group) + "r/" }
func (s *Store) entryKey(group string, seq int64) string {
	return fmt.Sprintf("%s%020d", s.entriesPrefix(group), seq)
}

// load returns a group's cursor and its mod revision (0 when none), read
// with its resources at one revision.
func (s *Store) load(ctx context.Context, group string) (cursor, int64, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.cursorKey(group)), clientv3.OpGet(s.clustersPrefix(group), clientv3.WithPrefix())).Commit()
	if err != nil {
		return cursor{}, 0, fmt.Errorf("read history cursor: %w", err)
	}
	head, shards := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(head) == 0 {
		return cursor{}, 0, nil
	}
	var c cursor
	if err := json.Unmarshal(head[0].Value, &c); err != nil {
		return cursor{}, 0, fmt.Errorf("history cursor of %s: %w", group, err)
	}
	if len(c.Resources) > 0 {
		c.inline = true // an earlier version's cursor: its resources are inline
		for k, v := range c.Resources {
			c.put(k, v, false)
		}
		c.Resources, c.owned = nil, nil
		return c, head[0].ModRevision, nil
	}
	// Each record is one cluster's map already (clusterOps wrote it so),
	// under the cluster's name.
	c.clusters = make(map[string]map[string]resState, len(shards))
	for _, kv := range shards {
		var m map[string]resState
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return cursor{}, 0, fmt.Errorf("history cursor of %s: %w", kv.Key, err)
		}
		if len(m) > 0 {
			c.clusters[strings.TrimPrefix(string(kv.Key), s.clustersPrefix(group))] = m
		}
	}
	return c, head[0].ModRevision, nil
}

// errMoved means the cursor changed since it was read: another recorder
// wrote (a replica that owned the group a moment ago).
var errMoved = errors.New("history cursor moved")

// append writes entries after cur, in transactions of at most maxOps
// entries, each guarded by the cursor's revision and carrying the cursor
// that accounts for exactly what it wrote (its head and the clusters the
// entries touched), so a crash between two leaves a consistent state and
// nothing is written twice. It returns the new cursor and its revision,
// and errMoved when another writer came first.
func (s *Store) append(ctx context.Context, group string, cur cursor, rev int64, entries []Entry) (cursor, int64, error) {
	cKey := s.cursorKey(group)
	guard := func() clientv3.Cmp { return clientv3.Compare(clientv3.ModRevision(cKey), "=", rev) }
	if cur.inline {
		// Every cluster's record first (the cursor, still inline, does not
		// move, so the guard holds); the cursor drops them with the first
		// chunk below.
		if err := s.putClusters(ctx, group, cur, nil, guard()); err != nil {
			return cur, rev, err
		}
	}
	if skip := len(entries) - int(s.limit); skip > 0 {
		var err error
		if cur, err = s.skip(ctx, group, cur, entries[:skip], guard()); err != nil {
			return cur, rev, err
		}
		entries = entries[skip:]
	}
	for start := 0; start < len(entries); start += maxOps {
		chunk := entries[start:min(len(entries), start+maxOps)]
		next := cur.clone()
		next.inline = false
		ops := make([]clientv3.Op, 0, 2*len(chunk)+2)
		touched := map[string]bool{}
		for i := range chunk {
			next.apply(&chunk[i])
			data, err := json.Marshal(chunk[i])
			if err != nil {
				return cur, rev, err
			}
			ops = append(ops, clientv3.OpPut(s.entryKey(group, chunk[i].Seq), string(data)))
			if chunk[i].Resource != nil {
				touched[clusterOf(chunk[i].key())] = true
			}
		}
		ops = append(ops, s.clusterOps(group, next, touched)...)
		if oldest := next.Seq - s.limit; oldest > next.Trimmed {
			// Everything at or below oldest goes: the last Limit stay. From
			// the last trim on, not from 0: etcd walks every key a range
			// names, the deleted ones too until its next compaction, and
			// at fleet size a trim from 0 walked tens of thousands per
			// append (most of an idle orchestrator's CPU at 10,000 clusters).
			ops = append(ops, clientv3.OpDelete(s.entryKey(group, next.Trimmed+1), clientv3.WithRange(s.entryKey(group, oldest+1))))
			next.Trimmed = oldest
		}
		data, err := json.Marshal(next.head())
		if err != nil {
			return cur, rev, err
		}
		ops = append(ops, clientv3.OpPut(cKey, string(data)))
		resp, err := s.cli.Txn(ctx).If(guard()).Then(ops...).Commit()
		if err != nil {
			return cur, rev, fmt.Errorf("append history: %w", err)
		}
		if !resp.Succeeded {
			return cur, rev, errMoved
		}
		cur, rev = next, resp.Header.Revision
	}
	return cur, rev, nil
}

// skip moves cur past entries the limit would delete within the same
// append, without writing them: a DIG instantiated on 10,000 clusters
// makes tens of thousands of transitions a second, and writing each only
// for the trim to delete it doubled etcd's work for nothing. The records
// of the clusters they touched are written (under guard; the cursor does
// not move, as for an inline cursor's records), so the next entries and
// a restarted recorder diff from where they left the resources. Unlike a
// chunk, this write does not move the cursor: a recorder that stops (or
// loses the group) before the first chunk leaves those transitions
// unrecorded, a gap docs/status.md admits.
func (s *Store) skip(ctx context.Context, group string, cur cursor, entries []Entry, guard clientv3.Cmp) (cursor, error) {
	next := cur.clone()
	touched := map[string]bool{}
	for i := range entries {
		next.apply(&entries[i])
		if entries[i].Resource != nil {
			touched[clusterOf(entries[i].key())] = true
		}
	}
	if err := s.putClusters(ctx, group, next, touched, guard); err != nil {
		return cur, err
	}
	return next, nil
}

// clusterOf is the cluster record a resource key belongs to.
func clusterOf(key string) string { return status.KeyCluster(key) }

// clusterOps writes the records of the touched clusters (all, when nil)
// as c has them; a cluster with no resource left loses its record.
func (s *Store) clusterOps(group string, c cursor, touched map[string]bool) []clientv3.Op {
	if touched == nil {
		touched = c.allClusters()
	}
	var ops []clientv3.Op
	for cl := range touched {
		m := c.clusters[cl]
		if len(m) == 0 {
			ops = append(ops, clientv3.OpDelete(s.clustersPrefix(group)+cl))
			continue
		}
		data, _ := json.Marshal(m) // a map of strings always marshals
		ops = append(ops, clientv3.OpPut(s.clustersPrefix(group)+cl, string(data)))
	}
	return ops
}

// putClusters writes every cluster's record of c, in transactions etcd
// takes, each under guard.
func (s *Store) putClusters(ctx context.Context, group string, c cursor, touched map[string]bool, guard clientv3.Cmp) error {
	ops := s.clusterOps(group, c, touched)
	for start := 0; start < len(ops); start += maxOps {
		resp, err := s.cli.Txn(ctx).If(guard).Then(ops[start:min(len(ops), start+maxOps)]...).Commit()
		if err != nil {
			return fmt.Errorf("append history: %w", err)
		}
		if !resp.Succeeded {
			return errMoved
		}
	}
	return nil
}

// List returns a subject's entries that pass f, in time order (entries of
// the same time in the order recorded).
func (s *Store) List(ctx context.Context, group string, f Filter) ([]Entry, error) {
	resp, err := s.cli.Get(ctx, s.entriesPrefix(group), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	out := make([]Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e Entry
		if json.Unmarshal(kv.Value, &e) != nil || !f.Match(e) {
			continue
		}
		out = append(out, e)
	}
	sortEntries(out)
	return out, nil
}

func sortEntries(l []Entry) {
	sort.SliceStable(l, func(i, j int) bool {
		if !l[i].Time.Equal(l[j].Time) {
			return l[i].Time.Before(l[j].Time)
		}
		return l[i].Seq < l[j].Seq
	})
}

// Delete drops a subject's history (the subject was deleted).
func (s *Store) Delete(ctx context.Context, group string) error {
	if _, err := s.cli.Delete(ctx, s.groupPrefix(group), clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("delete history: %w", err)
	}
	return nil
}

// Follower delivers a subject's entries as they are appended, by whichever
// replica records them. It runs no goroutine of its own: its owner selects
// on C and decodes what arrives with Entries.
type Follower struct {
	ch     clientv3.WatchChan
	filter Filter
}

// Follow starts following group's new entries that pass f until ctx ends.
// It watches from now, not from a listed revision, so not through
// etcdwatch: a history stream follows from now (the past is GET
// …/history), and a broken watch closes C, which ends the stream.
func (s *Store) Follow(ctx context.Context, group string, f Filter) *Follower {
	return &Follower{ch: s.cli.Watch(clientv3.WithRequireLeader(ctx), s.entriesPrefix(group), clientv3.WithPrefix()), filter: f}
}

// C receives etcd watch responses; it is closed when the context ends or
// the watch fails.
func (f *Follower) C() clientv3.WatchChan { return f.ch }

// Entries decodes a watch response into the entries it appended that pass
// the filter; an error says the watch ended.
func (f *Follower) Entries(resp clientv3.WatchResponse) ([]Entry, error) {
	if err := resp.Err(); err != nil {
		return nil, err
	}
	var out []Entry
	for _, ev := range resp.Events {
		if ev.Type != clientv3.EventTypePut {
			continue
		}
		var e Entry
		if json.Unmarshal(ev.Kv.Value, &e) == nil && f.filter.Match(e) {
			out = append(out, e)
		}
	}
	return out, nil
}
