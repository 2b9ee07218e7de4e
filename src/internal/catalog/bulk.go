package catalog

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Reads of many objects at once. An instantiation on a large fleet asks
// about every cluster: per object, a List or an Alive is one or two etcd
// round trips, and 10,000 clusters' labels and liveness were 30,000 reads
// one after another, most of the instantiation's time on three replicas.

// readBatch is how many keys one transaction reads: under etcd's default
// --max-txn-ops (128), with room for a small answer each.
const readBatch = 64

// eachBatch is how many entries one read of EachUnder brings: 10,000
// clusters' labels in 40 reads, and a page of the largest documents
// (limits.go) still a few megabytes.
const eachBatch = 256

// EachUnder calls f, in key order, with every object of the kind whose
// key begins with ancestor (all the labels of a provider's clusters,
// say) and its key. With the index it is one paged range read whatever
// the number of parents; without, one query.
func (r *Resource[S]) EachUnder(ctx context.Context, ancestor Key, f func(Key, Object[S]) error) error {
	return r.eachUnder(ctx, ancestor, eachBatch, f)
}

// eachUnder is EachUnder reading page entries at a time from the index.
func (r *Resource[S]) eachUnder(ctx context.Context, ancestor Key, page int, f func(Key, Object[S]) error) error {
	if len(ancestor) >= len(r.kind.KeyFields()) {
		panic(fmt.Sprintf("catalog: ancestor %v does not fit kind %s", ancestor, r.kind.Name))
	}
	x := r.cat.index()
	if x == nil {
		return r.each(ctx, append(keyFilter(r.kind, ancestor), notPending), r.keySort(), f)
	}
	own := x.prefix + r.kind.Collection + "/"
	prefix := x.children(r.kind, ancestor)
	end := clientv3.GetPrefixRangeEnd(prefix)
	for from := prefix; ; {
		resp, err := x.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(page)))
		if err != nil {
			return errdefs.Unavailable(err, "list %ss", r.kind.Name)
		}
		for _, kv := range resp.Kvs {
			key := Key(strings.Split(strings.TrimPrefix(string(kv.Key), own), indexSep))
			if len(key) != len(r.kind.KeyFields()) {
				return fmt.Errorf("list %ss: index entry %q has no whole key", r.kind.Name, kv.Key)
			}
			var obj Object[S]
			if err := bson.Unmarshal(kv.Value, &obj); err != nil {
				return fmt.Errorf("list %ss: %s: %w", r.kind.Name, kv.Key, err)
			}
			if err := f(key, obj); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// AliveAll is Alive for each key: the first key refused and why (nil,
// nil when all are alive). With the index, readBatch keys a read.
func (r *Resource[S]) AliveAll(ctx context.Context, keys []Key) (Key, error) {
	for _, key := range keys {
		r.checkKey(key)
	}
	x := r.cat.index()
	if x == nil {
		for _, key := range keys {
			if err := r.cat.alive(ctx, r.kind, key); err != nil {
				return key, err
			}
		}
		return nil, nil
	}
	for start := 0; start < len(keys); start += readBatch {
		batch := keys[start:min(len(keys), start+readBatch)]
		ops := make([]clientv3.Op, len(batch))
		for i, key := range batch {
			ops[i] = clientv3.OpGet(x.key(r.kind, key))
		}
		resp, err := x.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return batch[0], errdefs.Unavailable(err, "read the catalogue index")
		}
		for i, key := range batch {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				return key, errdefs.NotFound("%s not found", r.kind.describe(key))
			}
			if err := r.cat.aliveDoc(ctx, r.kind, key, kvs[0].Value); err != nil {
				return key, err
			}
		}
	}
	return nil, nil
}
