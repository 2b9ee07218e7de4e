package hub

import (
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// The manifests the hub sends agents are content-addressed and checked
// against their hash when read, so a copy read once serves every agent
// that asks for the same bytes: an app placed on 10,000 clusters has the
// same few manifests on each, and reading them from etcd for each agent
// was 50,000 reads per instantiation. Small manifests alone are kept, so
// the cache stays small (blobCacheEntries × blobCacheMax at the very
// most) whatever the fleet renders.
const (
	blobCacheEntries = 256
	blobCacheMax     = 64 << 10
	blobReadTimeout  = 30 * time.Second
)

// blobReader reads a context's manifest by its hash, checked.
type blobReader interface {
	ReadBlob(ctx context.Context, id, sum string) ([]byte, error)
}

// blobCache keeps recently sent manifests by hash.
type blobCache struct {
	read   blobReader
	lru    *lru.Cache[string, []byte]
	flight singleflight.Group
}

func newBlobCache(read blobReader) *blobCache {
	c, err := lru.New[string, []byte](blobCacheEntries)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &blobCache{read: read, lru: c}
}

// get returns the manifest whose hash is sum, which context id holds; the
// caller has checked the agent may have it. The bytes are shared: never
// modified.
func (c *blobCache) get(ctx context.Context, id, sum string) ([]byte, error) {
	if data, ok := c.lru.Get(sum); ok {
		return data, nil
	}
	// Kept by hash alone: whichever context's copy was read, the bytes
	// are the same (ReadBlob checks them). A read in flight is shared by
	// the agents asking for the same context's copy (another context's
	// may be gone, pruned, while this one's is not), and is the flight's,
	// not its first caller's: that agent going away must not fail it for
	// the others waiting on it.
	v, err, _ := c.flight.Do(id+"/"+sum, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), blobReadTimeout)
		defer cancel()
		data, err := c.read.ReadBlob(rctx, id, sum)
		if err == nil && len(data) <= blobCacheMax {
			c.lru.Add(sum, data)
		}
		return data, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}
