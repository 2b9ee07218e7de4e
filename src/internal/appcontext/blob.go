package appcontext

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultMaxRequestBytes is etcd's default --max-request-bytes (1.5 MiB).
// TestEtcdRequestLimit measures it on the embedded server.
const DefaultMaxRequestBytes = 1536 * 1024

// BlobRef points at a manifest stored by content under the context:
// /ctx/<id>/blob/<sha256>/<chunk>, chunks numbered from 0. A manifest
// placed on many clusters is stored once per context.
type BlobRef struct {
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
	Chunks int    `json:"chunks"`
}

// limits derives the write sizes from the etcd request limit: a value
// never exceeds a quarter of it and a transaction half, which leaves room
// for keys, protobuf framing and an etcd run with a smaller limit than the
// one configured.
type limits struct {
	chunk int // largest value written
	txn   int // largest transaction (sum of keys and values)
}

func newLimits(maxRequest int) limits {
	if maxRequest <= 0 {
		maxRequest = DefaultMaxRequestBytes
	}
	return limits{chunk: maxRequest / 4, txn: maxRequest / 2}
}

// batch collects puts and commits them in transactions bounded by maxOps
// and the byte budget, in order: a reader following the keys with a watch
// sees a blob's chunks before the resource that refers to them.
type batch struct {
	s   *Store
	ops []clientv3.Op
	sz  []int
	// guards are conditions every transaction of the batch holds under
	// (a writer's fencing token); ErrGuard when one does not.
	guards []clientv3.Cmp
}

// ErrGuard is a guarded write refused because its guard no longer held:
// the writer lost what entitled it to write (its claim on the group).
var ErrGuard = errors.New("appcontext: the write's guard no longer holds")

// opOverhead approximates the per-operation framing of a transaction.
const opOverhead = 32

func (b *batch) put(key string, value []byte) {
	b.ops = append(b.ops, clientv3.OpPut(key, string(value)))
	b.sz = append(b.sz, len(key)+len(value)+opOverhead)
}

func (b *batch) commit(ctx context.Context) error {
	for start := 0; start < len(b.ops); {
		end, total := start, 0
		for end < len(b.ops) && end-start < maxOps && (end == start || total+b.sz[end] <= b.s.lim.txn) {
			total += b.sz[end]
			end++
		}
		resp, err := b.s.cli.Txn(ctx).If(b.guards...).Then(b.ops[start:end]...).Commit()
		if err != nil {
			return fmt.Errorf("write context: %w", err)
		}
		if !resp.Succeeded {
			return ErrGuard
		}
		start = end
	}
	b.ops, b.sz = nil, nil
	return nil
}

// putResources queues the resources of placements: each manifest as a
// blob (skipping those in have, which already exist, and recording new
// ones in have), then the resource itself referring to it.
func (s *Store) putResources(b *batch, id string, placements []*Placement, have map[string]bool) error {
	for _, p := range placements {
		for i, r := range p.Resources {
			r.Order = i
			if len(r.Manifest) > 0 {
				sum := sha256.Sum256(r.Manifest)
				ref := BlobRef{SHA256: hex.EncodeToString(sum[:]), Size: len(r.Manifest)}
				ref.Chunks = (len(r.Manifest) + s.lim.chunk - 1) / s.lim.chunk
				if !have[ref.SHA256] {
					have[ref.SHA256] = true
					for c := 0; c < ref.Chunks; c++ {
						chunk := r.Manifest[c*s.lim.chunk : min((c+1)*s.lim.chunk, len(r.Manifest))]
						b.put(s.blobPrefix(id)+ref.SHA256+"/"+strconv.Itoa(c), chunk)
					}
				}
				r.Manifest, r.ManifestRef = nil, &ref
			}
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			b.put(s.resPrefix(id, p.App, p.Cluster)+r.Key()+"/manifest", data)
		}
	}
	return nil
}

func (s *Store) blobPrefix(id string) string { return s.ctxPrefix(id) + "blob/" }

// blobs lists the blobs a context already stores (a keys-only range read).
func (s *Store) blobs(ctx context.Context, id string) (map[string]bool, error) {
	resp, err := s.cli.Get(ctx, s.blobPrefix(id), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("list manifests of context %s: %w", id, err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		sum, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), s.blobPrefix(id)), "/")
		have[sum] = true
	}
	return have, nil
}

// blob is a manifest being assembled from its chunks.
type blob struct {
	chunks map[int][]byte
	data   []byte // set once every chunk arrived
}

// applyBlobKey records one chunk (rest is "<sha256>/<n>").
func (b *builder) applyBlobKey(rest string, v []byte, deleted bool) {
	sum, n, ok := strings.Cut(rest, "/")
	idx, err := strconv.Atoi(n)
	if !ok || err != nil {
		return
	}
	bl := b.blobs[sum]
	if deleted {
		// Manifests are deleted whole, once nothing refers to them; the
		// resources that did keep their assembled bytes.
		delete(b.blobs, sum)
		return
	}
	if bl != nil && bl.data != nil {
		return // complete; content-addressed, so a rewrite is identical
	}
	if bl == nil {
		bl = &blob{chunks: map[int][]byte{}}
		b.blobs[sum] = bl
	}
	bl.chunks[idx] = append([]byte(nil), v...)
	bl.data = nil
	b.unresolved = true
}

// resolve fills in the manifests whose blobs are complete. Resources share
// the assembled bytes, so a manifest placed on many clusters is held once.
func (b *builder) resolve() {
	if !b.unresolved {
		return
	}
	b.unresolved = false
	for _, p := range b.ctx.Placements {
		for i := range p.Resources {
			r := &p.Resources[i]
			if r.ManifestRef == nil || len(r.Manifest) > 0 {
				continue
			}
			if data := b.blobData(*r.ManifestRef); data != nil {
				r.Manifest = data
			} else {
				b.unresolved = true // not all chunks yet
			}
		}
	}
}

func (b *builder) blobData(ref BlobRef) []byte {
	bl := b.blobs[ref.SHA256]
	if bl == nil {
		return nil
	}
	if bl.data != nil {
		return bl.data
	}
	if len(bl.chunks) < ref.Chunks {
		return nil
	}
	data := make([]byte, 0, ref.Size)
	for c := 0; c < ref.Chunks; c++ {
		chunk, ok := bl.chunks[c]
		if !ok {
			return nil
		}
		data = append(data, chunk...)
	}
	if len(data) != ref.Size {
		return nil
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil
	}
	bl.data, bl.chunks = data, nil
	return data
}
