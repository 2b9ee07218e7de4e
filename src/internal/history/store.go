package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// DefaultLimit is how many entries a subject keeps by default.
const DefaultLimit = 1000

// maxOps keeps each transaction under etcd's default --max-txn-ops (128),
// with room for the cursor and the trim.
const maxOps = 100

// Store keeps each subject's entries and cursor in etcd:
//
//	<prefix>/history/<group>/cursor      the last recorded state
//	<prefix>/history/<group>/e/<seq>     one entry, seq zero-padded
//
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
func (s *Store) entryKey(group string, seq int64) string {
	return fmt.Sprintf("%s%020d", s.entriesPrefix(group), seq)
}

// load returns a group's cursor and its mod revision (0 when none).
func (s *Store) load(ctx context.Context, group string) (cursor, int64, error) {
	resp, err := s.cli.Get(ctx, s.cursorKey(group))
	if err != nil {
		return cursor{}, 0, fmt.Errorf("read history cursor: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return cursor{}, 0, nil
	}
	var c cursor
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return cursor{}, 0, fmt.Errorf("history cursor of %s: %w", group, err)
	}
	return c, resp.Kvs[0].ModRevision, nil
}

// errMoved means the cursor changed since it was read: another recorder
// wrote (a replica that owned the group a moment ago).
var errMoved = errors.New("history cursor moved")

// append writes entries after cur, in transactions of at most maxOps
// entries, each guarded by the cursor's revision and carrying the cursor
// that accounts for exactly what it wrote, so a crash between two leaves a
// consistent state and nothing is written twice. It returns the new
// cursor, numbered entries, and errMoved when another writer came first.
func (s *Store) append(ctx context.Context, group string, cur cursor, rev int64, entries []Entry) (cursor, []Entry, error) {
	cKey := s.cursorKey(group)
	for start := 0; start < len(entries); start += maxOps {
		chunk := entries[start:min(len(entries), start+maxOps)]
		next := cur.clone()
		ops := make([]clientv3.Op, 0, len(chunk)+2)
		for i := range chunk {
			next.apply(&chunk[i])
			data, err := json.Marshal(chunk[i])
			if err != nil {
				return cur, nil, err
			}
			ops = append(ops, clientv3.OpPut(s.entryKey(group, chunk[i].Seq), string(data)))
		}
		data, err := json.Marshal(next)
		if err != nil {
			return cur, nil, err
		}
		ops = append(ops, clientv3.OpPut(cKey, string(data)))
		if oldest := next.Seq - s.limit; oldest > 0 {
			// Everything at or below oldest goes: the last Limit stay.
			ops = append(ops, clientv3.OpDelete(s.entryKey(group, 0), clientv3.WithRange(s.entryKey(group, oldest+1))))
		}
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(cKey), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return cur, nil, fmt.Errorf("append history: %w", err)
		}
		if !resp.Succeeded {
			return cur, nil, errMoved
		}
		cur, rev = next, resp.Header.Revision
	}
	return cur, entries, nil
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
