package notify

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A pending payload's part larger than MaxInlinePart is kept gzip-compressed
// in chunks of its own:
//
//	<prefix>frozen/<key>/<sequence>/<part>/<n>
//
// written (under the owner's guards) before the state that names them, so
// a state never names chunks that are not there; they go with the state
// that no longer names them (the payload answered or dropped), and a newly
// frozen payload's replace an older one's.

// frozenRoot holds the chunks; no state key starts with it.
const frozenRoot = "frozen/"

// maxChunk bounds one chunk (compressed), so a transaction of two stays
// within maxTxnBytes.
const maxChunk = 512 << 10

// FrozenRef names a part kept in chunks: how many, and the part's size and
// sha256 (hex) uncompressed, checked when it is read back.
type FrozenRef struct {
	Sequence int64  `json:"sequence"`
	Chunks   int    `json:"chunks"`
	Size     int    `json:"size"`
	SHA256   string `json:"sha256"`
}

// ErrFrozenLost is a part whose chunks are missing or corrupt.
var ErrFrozenLost = errors.New("notify: a frozen part of the pending payload is missing or corrupt")

// frozen reports whether the payload has parts under keys of their own.
func (p *Pending) frozen() bool {
	return p != nil && (p.EnvelopeRef != nil || p.ChangesRef != nil || p.DeltaRef != nil)
}

// deltaPart is how Delta and Gone are kept when they have keys of their own.
type deltaPart struct {
	Delta map[string]string `json:"delta,omitempty"`
	Gone  []string          `json:"gone,omitempty"`
}

// minDeltaToSpill is how many digests a delta has before its size is
// worth measuring: fewer never come near MaxInlinePart.
const minDeltaToSpill = 256

// largeDelta is the payload's Delta and Gone encoded, if they have no keys
// of their own yet and are larger than MaxInlinePart; nil otherwise.
func (p *Pending) largeDelta() ([]byte, error) {
	if p.DeltaRef != nil || len(p.Delta)+len(p.Gone) < minDeltaToSpill {
		return nil, nil
	}
	data, err := json.Marshal(deltaPart{Delta: p.Delta, Gone: p.Gone})
	if err != nil || len(data) <= MaxInlinePart {
		return nil, err
	}
	return data, nil
}

func (s *States) frozenPrefix(key string) string { return s.prefix + frozenRoot + key + "/" }

// seqPrefix holds one payload's chunks, every part.
func (s *States) seqPrefix(key string, seq int64) string {
	return fmt.Sprintf("%s%d/", s.frozenPrefix(key), seq)
}

func (s *States) partPrefix(key string, seq int64, part string) string {
	return s.seqPrefix(key, seq) + part + "/"
}

// dropFrozen removes every chunk of a subscription.
func (s *States) dropFrozen(key string) clientv3.Op {
	return clientv3.OpDelete(s.frozenPrefix(key), clientv3.WithPrefix())
}

// dropOthers removes, with the state that names p, every chunk p does not
// use: all of them when p has none. Done in the state's own transaction,
// never before it, the chunks of the payload etcd still names stay until
// a state that no longer names it is written, so a process that stops in
// between resends that payload unchanged.
func (s *States) dropOthers(key string, p *Pending) []clientv3.Op {
	if !p.frozen() {
		return []clientv3.Op{s.dropFrozen(key)}
	}
	prefix := s.frozenPrefix(key)
	own := s.seqPrefix(key, p.Sequence)
	// Keys of other sequences sort before <seq>/ or from <seq>0 on ("0"
	// follows "/"): the two ranges around this payload's own.
	return []clientv3.Op{
		clientv3.OpDelete(prefix, clientv3.WithRange(own)),
		clientv3.OpDelete(strings.TrimSuffix(own, "/")+"0", clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))),
	}
}

// spill writes the payload's large parts that have no chunks yet, after
// removing any other payload's, and names them in p.
func (s *States) spill(ctx context.Context, key string, p *Pending, guards []clientv3.Cmp) error {
	if p == nil || p.Body != nil {
		return nil
	}
	envelope := p.EnvelopeRef == nil && len(p.Envelope) > MaxInlinePart
	changes := p.ChangesRef == nil && len(p.Changes) > MaxInlinePart
	delta, err := p.largeDelta()
	if err != nil {
		return err
	}
	if !envelope && !changes && delta == nil {
		return nil
	}
	if !p.frozen() { // a cut-short write of this payload's (others' stay: see dropOthers)
		own := s.seqPrefix(key, p.Sequence)
		if err := s.commit(ctx, guards, clientv3.OpDelete(own, clientv3.WithPrefix())); err != nil {
			return err
		}
	}
	if envelope {
		if p.EnvelopeRef, err = s.writePart(ctx, key, p.Sequence, "envelope", p.Envelope, guards); err != nil {
			return err
		}
	}
	if changes {
		if p.ChangesRef, err = s.writePart(ctx, key, p.Sequence, "changes", p.Changes, guards); err != nil {
			return err
		}
	}
	if delta != nil {
		if p.DeltaRef, err = s.writePart(ctx, key, p.Sequence, "delta", delta, guards); err != nil {
			return err
		}
	}
	return nil
}

// writePart compresses data and writes its chunks, two a transaction.
func (s *States) writePart(ctx context.Context, key string, seq int64, part string, data []byte, guards []clientv3.Cmp) (*FrozenRef, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	ref := &FrozenRef{Sequence: seq, Size: len(data), SHA256: hex.EncodeToString(sum[:])}
	z := buf.Bytes()
	var ops []clientv3.Op
	size := 0
	for n := 0; len(z) > 0 || n == 0; n++ {
		c := z[:min(len(z), maxChunk)]
		z = z[len(c):]
		if len(ops) >= maxTxnOps || size+len(c) > maxTxnBytes {
			if err := s.commit(ctx, guards, ops...); err != nil {
				return nil, err
			}
			ops, size = nil, 0
		}
		ops, size = append(ops, clientv3.OpPut(fmt.Sprintf("%s%06d", s.partPrefix(key, seq, part), n), string(c))), size+len(c)
		ref.Chunks = n + 1
	}
	if err := s.commit(ctx, guards, ops...); err != nil {
		return nil, err
	}
	return ref, nil
}

// thaw reads back the payload's parts kept in chunks; ErrFrozenLost when
// one is missing or corrupt.
func (s *States) thaw(ctx context.Context, key string, p *Pending) error {
	if p == nil {
		return nil
	}
	var err error
	if p.EnvelopeRef != nil && p.Envelope == nil {
		if p.Envelope, err = s.readPart(ctx, key, "envelope", p.EnvelopeRef); err != nil {
			return err
		}
	}
	if p.ChangesRef != nil && p.Changes == nil {
		if p.Changes, err = s.readPart(ctx, key, "changes", p.ChangesRef); err != nil {
			return err
		}
	}
	if p.DeltaRef != nil && p.Delta == nil && p.Gone == nil {
		data, err := s.readPart(ctx, key, "delta", p.DeltaRef)
		if err != nil {
			return err
		}
		var d deltaPart
		if err := json.Unmarshal(data, &d); err != nil {
			return fmt.Errorf("%w: delta: %w", ErrFrozenLost, err)
		}
		p.Delta, p.Gone = d.Delta, d.Gone
	}
	return nil
}

// LoadWhole is Load with the pending payload's parts kept under keys of
// their own read back (what a sink purging a subject's objects needs);
// ErrFrozenLost, with the rest of the state, when one is missing or
// corrupt.
func (s *States) LoadWhole(ctx context.Context, key string) (State, bool, error) {
	st, found, err := s.Load(ctx, key)
	if err != nil || !found {
		return st, found, err
	}
	return st, true, s.thaw(ctx, key, st.Pending)
}

func (s *States) readPart(ctx context.Context, key, part string, ref *FrozenRef) ([]byte, error) {
	prefix := s.partPrefix(key, ref.Sequence, part)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("read the pending payload's %s: %w", part, err)
	}
	if len(resp.Kvs) != ref.Chunks {
		return nil, fmt.Errorf("%w: %s has %d of %d chunks", ErrFrozenLost, part, len(resp.Kvs), ref.Chunks)
	}
	var z bytes.Buffer
	for n, kv := range resp.Kvs {
		if strings.TrimPrefix(string(kv.Key), prefix) != fmt.Sprintf("%06d", n) {
			return nil, fmt.Errorf("%w: %s chunk %d is %s", ErrFrozenLost, part, n, kv.Key)
		}
		z.Write(kv.Value)
	}
	zr, err := gzip.NewReader(&z)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFrozenLost, part, err)
	}
	// The size it was written with bounds what is read, corrupt or not.
	data, err := io.ReadAll(io.LimitReader(zr, int64(ref.Size)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFrozenLost, part, err)
	}
	if sum := sha256.Sum256(data); len(data) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("%w: %s does not match its sha256", ErrFrozenLost, part)
	}
	return data, nil
}
