package catalog

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
)

func indexed(t *testing.T, kinds ...*Kind) (*Catalog, context.Context, string) {
	t.Helper()
	c, ctx := newCatalogOf(t, kinds...)
	prefix := env.EtcdPrefix()
	if _, err := c.useIndex(ctx, env.Etcd.Client, prefix); err != nil {
		t.Fatal(err)
	}
	return c, ctx, prefix
}

// Pages follow the list's order (a composite app's name, then version,
// whatever characters the names hold) and continue where the last ended.
func TestListPages(t *testing.T) {
	c, ctx, _ := indexed(t, Projects, CompositeApps)
	if err := For[Empty](c, Projects).Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	cas := For[CompositeAppSpec](c, CompositeApps)
	names := []string{"ca", "ca-x", "ca.y", "cb", "c0"}
	for _, n := range names {
		for _, v := range []string{"v2", "v1"} {
			if err := cas.Create(ctx, Key{"p", n, v}, Object[CompositeAppSpec]{Metadata: Metadata{Name: n}, Spec: CompositeAppSpec{Version: v}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := cas.List(ctx, Key{"p"})
	if err != nil || len(all) != 10 {
		t.Fatalf("list: %d, %v", len(all), err)
	}
	var order []string
	for _, o := range all {
		order = append(order, o.Metadata.Name+"/"+o.Spec.Version)
	}
	want := "[c0/v1 c0/v2 ca/v1 ca/v2 ca-x/v1 ca-x/v2 ca.y/v1 ca.y/v2 cb/v1 cb/v2]"
	if fmt.Sprint(order) != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	var paged []string
	cont := ""
	for pages := 0; ; pages++ {
		p, err := cas.ListPage(ctx, Key{"p"}, cont, 3)
		if err != nil || pages > 5 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, o := range p.Items {
			paged = append(paged, o.Metadata.Name+"/"+o.Spec.Version)
		}
		if p.Continue == "" {
			break
		}
		cont = p.Continue
	}
	if fmt.Sprint(paged) != want {
		t.Fatalf("pages %v, want %s", paged, want)
	}
	if _, err := cas.ListPage(ctx, Key{"p"}, "!!", 3); err == nil {
		t.Fatal("a malformed token was accepted")
	}
	if _, err := cas.ListPage(ctx, Key{"nope"}, "", 3); err == nil {
		t.Fatal("a page under a missing project")
	}
}

// UseIndex repairs what a process killed between its two writes left:
// a missing entry, a stale one, one of an object that is gone.
func TestReconcileRepairs(t *testing.T) {
	c, ctx, prefix := indexed(t, Projects, testApps)
	projects := For[Empty](c, Projects)
	for _, n := range []string{"a", "b", "c"} {
		if err := projects.Create(ctx, Key{n}, project(n)); err != nil {
			t.Fatal(err)
		}
	}
	x := c.index()
	if _, err := env.Etcd.Client.Delete(ctx, x.key(Projects, Key{"a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(Projects.Collection).UpdateOne(ctx, bson.D{{Key: "project", Value: "b"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "metadata.description", Value: "changed behind its back"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(Projects.Collection).DeleteOne(ctx, bson.D{{Key: "project", Value: "c"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := c.useIndex(ctx, env.Etcd.Client, prefix)
	if err != nil || rec.Fixed != 3 {
		t.Fatalf("reconcile: %+v, %v", rec, err)
	}
	if got, err := projects.Get(ctx, Key{"b"}); err != nil || got.Metadata.Description != "changed behind its back" {
		t.Fatalf("b: %+v %v", got, err)
	}
	list, err := projects.List(ctx, Key{})
	if err != nil || len(list) != 2 || list[0].Metadata.Name != "a" {
		t.Fatalf("list after repair: %+v %v", list, err)
	}
	if rec, err := c.useIndex(ctx, env.Etcd.Client, prefix); err != nil || rec.Fixed != 0 {
		t.Fatalf("a second reconcile: %+v, %v", rec, err)
	}
}

// Concurrent replacements of one object leave its entry as MongoDB has it.
func TestConcurrentWritersConverge(t *testing.T) {
	c, ctx, _ := indexed(t, Projects)
	projects := For[Empty](c, Projects)
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := project("p")
			o.Metadata.Description = fmt.Sprint("writer ", i)
			if _, err := projects.Put(ctx, Key{"p"}, o); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var stored Object[Empty]
	if err := c.db.Collection(Projects.Collection).FindOne(ctx, bson.D{{Key: "project", Value: "p"}}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	got, err := projects.Get(ctx, Key{"p"})
	if err != nil || got.Metadata.Description != stored.Metadata.Description {
		t.Fatalf("index %q, MongoDB %q (%v)", got.Metadata.Description, stored.Metadata.Description, err)
	}
	resp, err := env.Etcd.Client.Get(ctx, c.index().prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Fatalf("%d entries, %v", resp.Count, err)
	}
}

// Lifecycle writes are mirrored into the index, so a Mirror fed with the
// index's keys knows every DIG's state without reading MongoDB; a
// lifecycle deleted with its DIG leaves the index too.
func TestLifecyclesAreMirrored(t *testing.T) {
	c, ctx, prefix := indexed(t, Projects, CompositeApps, DeploymentIntentGroups)
	key := Key{"p", "ca", "v1", "d"}
	if _, err := c.TransitionDIG(ctx, key, []string{StateCreated}, StateAction{State: StateApproved}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TransitionDIG(ctx, key, []string{StateApproved}, StateAction{State: StateInstantiated, ContextID: "42"}, "42"); err != nil {
		t.Fatal(err)
	}
	mirrored := func() MirroredState {
		t.Helper()
		m := NewMirror(prefix)
		resp, err := env.Etcd.Client.Get(ctx, m.Prefix(), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			m.Apply(string(kv.Key), kv.Value, false)
		}
		return m.State(DIGGroup(key))
	}
	if st := mirrored(); st != (MirroredState{Current: StateInstantiated, ContextID: "42", StatusContextID: "42"}) {
		t.Fatalf("mirrored state %+v", st)
	}
	if err := c.DeleteDIGState(ctx, key); err != nil {
		t.Fatal(err)
	}
	if st := mirrored(); st.Current != StateCreated || st.ContextID != "" {
		t.Fatalf("a deleted lifecycle is still mirrored: %+v", st)
	}
}
