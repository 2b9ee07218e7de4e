package appcontext

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultManifestCacheSize bounds the manifests Manifests keeps.
const DefaultManifestCacheSize = 64 << 20

// Manifests loads rendered manifests from etcd when a reader needs one
// (rsync applying or deleting a resource, a status answer with
// output=detail) and keeps the most recently used ones, at most MaxBytes
// of them together. Before, every deployed context's manifests stayed in
// memory for good (about 280 MiB for a DIG of 30 MB on two clusters).
// Manifests are stored by content, so one is cached by its sha256 whatever
// the context.
type Manifests struct {
	store *Store
	max   int64

	mu    sync.Mutex
	size  int64
	order *list.List // of *cached, most recently used first
	bySum map[string]*list.Element
}

type cached struct {
	sum  string
	data []byte
}

// NewManifests returns a cache over store's manifests holding at most
// maxBytes; 0 means DefaultManifestCacheSize.
func NewManifests(store *Store, maxBytes int64) *Manifests {
	if maxBytes <= 0 {
		maxBytes = DefaultManifestCacheSize
	}
	return &Manifests{store: store, max: maxBytes, order: list.New(), bySum: map[string]*list.Element{}}
}

// Get returns resource r's manifest in context id: its own bytes when it
// carries them, else the cached or stored ones. The bytes are shared: the
// caller must not change them.
func (m *Manifests) Get(ctx context.Context, id string, r Resource) ([]byte, error) {
	if len(r.Manifest) > 0 || r.ManifestRef == nil {
		return r.Manifest, nil
	}
	ref := *r.ManifestRef
	m.mu.Lock()
	if e, ok := m.bySum[ref.SHA256]; ok {
		m.order.MoveToFront(e)
		data := e.Value.(*cached).data
		m.mu.Unlock()
		return data, nil
	}
	m.mu.Unlock()
	data, err := m.store.readBlob(ctx, id, ref)
	if err != nil {
		return nil, err
	}
	m.put(ref.SHA256, data)
	return data, nil
}

// put caches data, evicting the least recently used beyond the bound; a
// manifest larger than the bound is not kept.
func (m *Manifests) put(sum string, data []byte) {
	n := int64(len(data))
	if n > m.max {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bySum[sum]; ok {
		return // loaded meanwhile by another reader
	}
	m.bySum[sum] = m.order.PushFront(&cached{sum: sum, data: data})
	m.size += n
	for m.size > m.max {
		last := m.order.Back()
		c := last.Value.(*cached)
		m.order.Remove(last)
		delete(m.bySum, c.sum)
		m.size -= int64(len(c.data))
	}
}

// Size is the bytes cached now.
func (m *Manifests) Size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size
}

// readBlob reads one manifest's chunks with a range read and checks them
// against its reference.
func (s *Store) readBlob(ctx context.Context, id string, ref BlobRef) ([]byte, error) {
	prefix := s.blobPrefix(id) + ref.SHA256 + "/"
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read manifest %s of context %s: %w", ref.SHA256, id, err)
	}
	chunks := make([][]byte, ref.Chunks)
	for _, kv := range resp.Kvs {
		n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil || n < 0 || n >= ref.Chunks {
			continue
		}
		chunks[n] = kv.Value
	}
	data := make([]byte, 0, ref.Size)
	for _, c := range chunks {
		if c == nil {
			return nil, fmt.Errorf("manifest %s of context %s: its stored chunks are incomplete", ref.SHA256, id)
		}
		data = append(data, c...)
	}
	sum := sha256.Sum256(data)
	if len(data) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("manifest %s of context %s: its stored chunks do not match it", ref.SHA256, id)
	}
	return data, nil
}
