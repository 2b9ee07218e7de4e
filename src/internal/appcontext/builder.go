package appcontext

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

// builder assembles a Context from its keys, in any order and
// incrementally: Store.Get feeds it one range read, the Cache feeds it a
// watch. Placements stay sorted by app and cluster, resources by Order.
type builder struct {
	ctx         *Context
	byPlacement map[string]*Placement
	// blobs are the context's manifests by content hash; unresolved is set
	// while a resource waits for its blob's chunks.
	blobs      map[string]*blob
	unresolved bool
	// lean builders keep no manifest, only its reference: the cache and
	// rsync load manifests when they need them (Manifests), so what they
	// hold does not grow with what was rendered.
	lean bool
}

func newBuilder() *builder {
	return &builder{ctx: &Context{}, byPlacement: map[string]*Placement{}, blobs: map[string]*blob{}}
}

func newLeanBuilder() *builder {
	b := newBuilder()
	b.lean = true
	return b
}

// applyMeta and applyStatus decode into a fresh value and then replace
// the old one: decoding in place would reuse the old value's slices and
// maps, which answers built from the cache may still be reading.
func (b *builder) applyMeta(v []byte) error {
	var m Meta
	if err := json.Unmarshal(v, &m); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	b.ctx.Meta = m
	return nil
}

func (b *builder) applyStatus(v []byte) error {
	var st Status
	if err := json.Unmarshal(v, &st); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	b.ctx.Status = st
	return nil
}

// applyPlacementKey applies one key below /ctx/<id>/:
// app/<app>/cluster/<ref>/res/<Kind>/<ns>/<name>/{manifest,status},
// app/<app>/cluster/<ref>/bundle, heal or blob/<sha256>/<chunk>. Unknown keys
// are ignored. Call resolve after a batch of keys.
func (b *builder) applyPlacementKey(rest string, v []byte, deleted bool) error {
	if blobKey, ok := strings.CutPrefix(rest, "blob/"); ok {
		if !b.lean {
			b.applyBlobKey(blobKey, v, deleted)
		}
		return nil
	}
	if rest == "heal" {
		if deleted {
			b.ctx.Heal = nil
			return nil
		}
		var req HealRequest
		if err := json.Unmarshal(v, &req); err != nil {
			return fmt.Errorf("sync request: %w", err)
		}
		b.ctx.Heal = &req
		return nil
	}
	app, ref, sub, ok := placementKey(rest)
	if !ok {
		return nil
	}
	parts := strings.Split(sub, "/")
	p := b.placement(app, ref)
	p.Rev++
	switch {
	case len(parts) == 1 && parts[0] == "bundle":
		if deleted {
			p.Bundle = nil
			return nil
		}
		var snap BundleSnapshot
		if err := json.Unmarshal(v, &snap); err != nil {
			return fmt.Errorf("bundle of %s on %s: %w", app, ref, err)
		}
		if len(snap.Status) > 0 && !snap.Deleted {
			var st v1alpha1.ResourceBundleStateStatus
			if json.Unmarshal(snap.Status, &st) == nil {
				if b.lean {
					// A lean builder (the cache, rsync) keeps one copy
					// of each placement's bundle, as small as it gets:
					// Parsed holds all the raw status says.
					trimBundle(&st)
					internBundle(&st)
					snap.Status = nil
				}
				snap.Parsed, snap.Index = &st, IndexBundle(&st)
			}
		}
		p.Bundle = &snap
	case len(parts) == 5 && parts[0] == "res":
		key := strings.Join(parts[1:4], "/")
		switch parts[4] {
		case "manifest":
			if deleted {
				p.removeResource(key)
				return nil
			}
			var r Resource
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("resource %s: %w", key, err)
			}
			if r.ManifestRef != nil && len(r.Manifest) == 0 && !b.lean {
				b.unresolved = true
			}
			if b.lean {
				internResource(&r)
			}
			p.putResource(r)
		case "status":
			if deleted {
				delete(p.Statuses, key)
				return nil
			}
			var st ResourceStatus
			if err := json.Unmarshal(v, &st); err != nil {
				return fmt.Errorf("resource %s status: %w", key, err)
			}
			if b.lean {
				key = intern(key) // the map keeps it
				internStatus(&st)
			}
			p.Statuses[key] = st
		}
	}
	return nil
}

// placementKey splits a context's key below its prefix,
// "app/<app>/cluster/<cluster>/<sub>", into the placement it belongs to
// and the rest; false for any other key. The builder, the cache and
// Placed all read placements from keys this way.
func placementKey(key string) (app string, ref ClusterRef, sub string, ok bool) {
	parts := strings.SplitN(key, "/", 5)
	if len(parts) < 5 || parts[0] != "app" || parts[2] != "cluster" || parts[4] == "" {
		return "", ClusterRef{}, "", false
	}
	ref, err := ParseClusterRef(parts[3])
	if err != nil {
		return "", ClusterRef{}, "", false
	}
	return parts[1], ref, parts[4], true
}

func (b *builder) placement(app string, ref ClusterRef) *Placement {
	pk := app + "\x00" + ref.String()
	if p := b.byPlacement[pk]; p != nil {
		return p
	}
	p := &Placement{App: app, Cluster: ref, Statuses: map[string]ResourceStatus{}}
	b.byPlacement[pk] = p
	i := placementAt(b.ctx.Placements, app, ref)
	b.ctx.Placements = append(b.ctx.Placements, nil)
	copy(b.ctx.Placements[i+1:], b.ctx.Placements[i:])
	b.ctx.Placements[i] = p
	return p
}

// exactGrowth is the size under which a placement's resources grow by one.
const exactGrowth = 16

// putResource inserts or replaces a resource, keeping apply order.
func (p *Placement) putResource(r Resource) {
	for i := range p.Resources {
		if p.Resources[i].Key() == r.Key() {
			p.Resources = slices.Delete(p.Resources, i, i+1) // zeroes the freed slot
			break
		}
	}
	i := sort.Search(len(p.Resources), func(i int) bool { return p.Resources[i].Order > r.Order })
	if n := len(p.Resources); n == cap(p.Resources) && n < exactGrowth {
		// Grown one at a time, a placement of five resources holds five,
		// not the eight doubling leaves (the cache holds every placement of
		// a fleet).
		grown := make([]Resource, n, n+1)
		copy(grown, p.Resources)
		p.Resources = grown
	}
	p.Resources = append(p.Resources, Resource{})
	copy(p.Resources[i+1:], p.Resources[i:])
	p.Resources[i] = r
}

func (p *Placement) removeResource(key string) {
	for i := range p.Resources {
		if p.Resources[i].Key() == key {
			p.Resources = slices.Delete(p.Resources, i, i+1) // zeroes the freed slot
			return
		}
	}
}
