package appcontext

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// The operations below write what SetResourceStatuses, PutBundle and
// PutClusterState write, for callers that commit them in transactions of
// their own (the fleet hub batches what many agents report, each
// cluster's part guarded by its agent's session).

// ResourceStatusOps returns the puts recording resource statuses.
func (s *Store) ResourceStatusOps(id string, updates []StatusUpdate) ([]clientv3.Op, error) {
	ops := make([]clientv3.Op, 0, len(updates))
	now := time.Now().UTC()
	for _, u := range updates {
		key, data, err := s.statusPut(id, u, now)
		if err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpPut(key, string(data)))
	}
	return ops, nil
}

// statusPut is the key and value recording one resource's status (dated
// now unless it says when).
func (s *Store) statusPut(id string, u StatusUpdate, now time.Time) (string, []byte, error) {
	if u.Status.Updated.IsZero() {
		u.Status.Updated = now
	}
	data, err := json.Marshal(u.Status)
	return s.resPrefix(id, u.App, u.Cluster) + u.Key + "/status", data, err
}

// BundleOp returns the put storing a bundle snapshot.
func (s *Store) BundleOp(id, app string, c ClusterRef, snap BundleSnapshot) (clientv3.Op, error) {
	data, err := json.Marshal(snap)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(s.ctxPrefix(id)+"app/"+app+"/cluster/"+c.String()+"/bundle", string(data)), nil
}

// ClusterStateKey is where a cluster's state is stored.
func (s *Store) ClusterStateKey(c ClusterRef) string { return s.prefix + "/clusters/" + c.String() }

// ClusterStateOp returns the put storing a cluster's state.
func (s *Store) ClusterStateOp(c ClusterRef, st ClusterState) (clientv3.Op, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(s.ClusterStateKey(c), string(data)), nil
}

// ReadBlob reads a context's manifest by its sha256 with one range read,
// and checks it against the hash.
func (s *Store) ReadBlob(ctx context.Context, id, sum string) ([]byte, error) {
	if len(sum) != sha256.Size*2 || strings.Trim(sum, "0123456789abcdef") != "" {
		return nil, errdefs.Invalid("%.80q is not a sha256", sum)
	}
	prefix := s.blobPrefix(id) + sum + "/"
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read manifest %s of context %s: %w", sum, id, err)
	}
	type chunk struct {
		n    int
		data []byte
	}
	chunks := make([]chunk, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil {
			continue
		}
		chunks = append(chunks, chunk{n, kv.Value})
	}
	sort.Slice(chunks, func(i, j int) bool { return chunks[i].n < chunks[j].n })
	var data []byte
	for i, c := range chunks {
		if c.n != i {
			return nil, errdefs.NotFound("manifest %s of context %s is incomplete", sum, id)
		}
		data = append(data, c.data...)
	}
	if len(chunks) == 0 {
		return nil, errdefs.NotFound("manifest %s of context %s not found", sum, id)
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return nil, errdefs.NotFound("manifest %s of context %s does not match its hash", sum, id)
	}
	return data, nil
}
