package appcontext

import (
	"fmt"
	"runtime/debug"
	"testing"
	"unsafe"
)

func TestBundleIndex(t *testing.T) {
	idx := MakeBundleIndex([]BundleEntry{
		{Kind: "Pod", Namespace: "b", Name: "p", ReadyStatus: "Pending"},
		{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "d"},
		{Kind: "Pod", Namespace: "a", Name: "p"},
		{Kind: "Pod", Namespace: "b", Name: "p", ReadyStatus: "Ready"}, // listed twice: the last is kept
		{Kind: "PersistentVolume", Name: "pv"},
	})
	if len(idx) != 4 {
		t.Fatalf("%d entries, want 4: %+v", len(idx), idx)
	}
	for i := 1; i < len(idx); i++ {
		if compareRef(idx[i-1].ref(), idx[i].ref()) >= 0 {
			t.Fatalf("not sorted at %d: %+v", i, idx)
		}
	}
	if e := idx.Get(EntryRef{Kind: "Pod", Namespace: "b", Name: "p"}); e == nil || e.ReadyStatus != "Ready" {
		t.Errorf("Pod b/p: %+v", e)
	}
	if e := idx.Get(EntryRef{Group: "apps", Kind: "Deployment", Namespace: "a", Name: "d"}); e == nil || e.Name != "d" {
		t.Errorf("Deployment a/d: %+v", e)
	}
	if e := idx.Get(EntryRef{Kind: "PersistentVolume", Name: "pv"}); e == nil {
		t.Error("PersistentVolume pv not found")
	}
	for _, missing := range []EntryRef{{Kind: "Pod", Namespace: "c", Name: "p"}, {Kind: "Pod", Name: "p"}, {}} {
		if e := idx.Get(missing); e != nil {
			t.Errorf("%+v found: %+v", missing, e)
		}
	}
	if empty := MakeBundleIndex(nil); empty == nil || len(empty) != 0 || empty.Get(EntryRef{}) != nil {
		t.Errorf("an index of no entries is %#v, want empty and not nil", empty)
	}
	if empty := IndexBundle(nil); empty == nil {
		t.Error("IndexBundle(nil) is nil; nil means not indexed")
	}
}

// TestCacheSharesStringsAcrossPlacements checks the lean builder keeps a
// string that every cluster's placement decodes once, not once a
// placement: the fleet's clusters report the same kinds and hashes.
func TestCacheSharesStringsAcrossPlacements(t *testing.T) {
	// A canonical copy nothing holds a handle to goes at a collection.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	b := newLeanBuilder()
	for i := range 2 {
		keys, values := placementKeys(fmt.Sprintf("c%d", i))
		for j := range keys {
			if err := b.applyPlacementKey(keys[j], values[j], false); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.resolve()
	if len(b.ctx.Placements) != 2 {
		t.Fatalf("%d placements", len(b.ctx.Placements))
	}
	p, q := b.ctx.Placements[0], b.ctx.Placements[1]
	same := func(what, x, y string) {
		t.Helper()
		if x == "" || x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q are two copies", what, x, y)
		}
	}
	same("resource kind", p.Resources[0].GVK.Kind, q.Resources[0].GVK.Kind)
	same("manifest reference", p.Resources[0].ManifestRef.SHA256, q.Resources[0].ManifestRef.SHA256)
	k := p.Resources[0].Key()
	same("applied manifest", p.Statuses[k].Manifest, q.Statuses[k].Manifest)
	same("applied fields", p.Statuses[k].Fields, q.Statuses[k].Fields)
	pe, qe := p.Bundle.Index[0], q.Bundle.Index[0]
	same("entry name", pe.Name, qe.Name)
	same("entry hash", pe.Typed.ManagedFieldsHash, qe.Typed.ManagedFieldsHash)
	same("entry readiness", pe.Typed.ReadyStatus, qe.Typed.ReadyStatus)
}
