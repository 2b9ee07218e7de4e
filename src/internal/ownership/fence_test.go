package ownership

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A fence's token is its claim's revision, and its guard holds only for
// that claim; after a clean release the fence fails at once.
func TestFenceTokenGuardAndRelease(t *testing.T) {
	prefix := env.EtcdPrefix()
	l := newLedger(t)
	r := startReplica(t, env.Etcd.Client, prefix, "f1", 5*time.Second, l.handler("f1"), []string{"item"})
	waitFor(t, "item acquired", 30*time.Second, func() (bool, string) { return r.kind.Owns("item"), "" })
	f, ok := r.kind.Fence("item")
	if !ok {
		t.Fatal("no fence for a held item")
	}
	if _, ok := r.kind.Fence("other"); ok {
		t.Fatal("a fence for an item not held")
	}
	ctx := context.Background()
	resp, err := env.Etcd.Client.Get(ctx, prefix+"owners/clusters/item")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("claim: %v %v", resp, err)
	}
	if f.Token() != resp.Kvs[0].CreateRevision {
		t.Fatalf("token %d, claim created at %d", f.Token(), resp.Kvs[0].CreateRevision)
	}
	if err := f.Check(); err != nil {
		t.Fatalf("check while held: %v", err)
	}
	if err := f.Wait(ctx); err != nil {
		t.Fatalf("wait while held: %v", err)
	}
	txn, err := env.Etcd.Client.Txn(ctx).If(f.Guards()...).Then(clientv3.OpPut(prefix+"x", "1")).Commit()
	if err != nil || !txn.Succeeded {
		t.Fatalf("guarded write while held: %v %v", txn, err)
	}
	r.kind.Drop("item")
	waitFor(t, "item released", 30*time.Second, func() (bool, string) { return !r.kind.Owns("item"), "" })
	if err := f.Check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("check after release = %v, want ErrFenced", err)
	}
	r.kind.Want("item")
	waitFor(t, "item acquired again", 30*time.Second, func() (bool, string) { return r.kind.Owns("item"), "" })
	f2, _ := r.kind.Fence("item")
	if f2.Token() <= f.Token() {
		t.Fatalf("a new claim's token %d is not above the old one's %d", f2.Token(), f.Token())
	}
	txn, err = env.Etcd.Client.Txn(ctx).If(f.Guards()...).Then(clientv3.OpPut(prefix+"x", "2")).Commit()
	if err != nil || txn.Succeeded {
		t.Fatalf("a write guarded by the old claim went through: %v %v", txn, err)
	}
	if err := (Fence{}).Check(); err != nil || len(Fence{}.Guards()) != 0 {
		t.Fatal("the zero fence fences")
	}
}

// A replica cut off from etcd stops writing (its fences fail) and
// releases its items (the ledger sees no item run twice) before its
// lease expires and another replica claims them; the old fence's guard
// then fails in etcd.
func TestFenceFailsBeforeTakeover(t *testing.T) {
	prefix := env.EtcdPrefix()
	l := newLedger(t)
	cut, proxy := env.EtcdBehindProxy(t)
	all := items(8)
	// A 6 s TTL leaves the victim 2 s between its renew deadline and the
	// takeover to run its releases: with 3 s (1 s to spare) a CI run under
	// -race and the e2e suite saw a release come after the takeover.
	victim := startReplica(t, cut, prefix, "victim", 6*time.Second, l.handler("victim"), all)
	survivor := startReplica(t, env.Etcd.Client, prefix, "survivor", 6*time.Second, l.handler("survivor"), all)
	var item string
	waitFor(t, "items shared", 30*time.Second, func() (bool, string) {
		owned := victim.kind.Owned()
		if len(owned) > 0 && len(owned)+len(survivor.kind.Owned()) == len(all) {
			item = owned[0]
			return true, ""
		}
		return false, fmt.Sprintf("victim %v", owned)
	})
	f, ok := victim.kind.Fence(item)
	if !ok {
		t.Fatal("no fence")
	}
	proxy.Cut()
	cutAt := time.Now()
	var fencedAt time.Time
	waitFor(t, "the survivor takes "+item, 30*time.Second, func() (bool, string) {
		if fencedAt.IsZero() && f.Check() != nil {
			fencedAt = time.Now()
		}
		return survivor.kind.Owns(item), ""
	})
	takenAt := time.Now()
	if fencedAt.IsZero() || !fencedAt.Before(takenAt) {
		t.Fatalf("the victim's fence failed at %v, after the survivor took the item (%v after the cut)", fencedAt.Sub(cutAt), takenAt.Sub(cutAt))
	}
	t.Logf("cut off: fenced after %s, taken over after %s (TTL 6s, renew deadline 4s)",
		fencedAt.Sub(cutAt).Round(10*time.Millisecond), takenAt.Sub(cutAt).Round(10*time.Millisecond))
	if err := f.Check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("check = %v", err)
	}
	txn, err := env.Etcd.Client.Txn(context.Background()).If(f.Guards()...).Then(clientv3.OpPut(prefix+"x", "late")).Commit()
	if err != nil || txn.Succeeded {
		t.Fatalf("a write guarded by the victim's claim went through: %v %v", txn, err)
	}
	proxy.Heal()
	victim.stop()
}
