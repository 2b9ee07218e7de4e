package appcontext

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

func TestCreateGetUpdateList(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	id := NewID()
	c1 := ClusterRef{"cp", "c1"}
	res := func(kind, name string) Resource {
		return Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: kind}, Name: name, Namespace: "default",
			Manifest: json.RawMessage(`{"kind":"` + kind + `"}`)}
	}
	meta := Meta{ID: id, Kind: "dig", Group: "p/ca/v1/dig", StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	placements := []*Placement{
		{App: "web", Cluster: c1, Resources: []Resource{res("Namespace", "n"), res("ConfigMap", "b"), res("ConfigMap", "a")}},
		{App: "db", Cluster: c1, Resources: []Resource{res("Service", "s")}},
	}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, placements); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, meta, Status{Status: Instantiating}, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	if err := s.SetResourceStatus(ctx, id, "web", c1, placements[0].Resources[1].Key(), ResourceStatus{Status: RsyncApplied}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx, id, Status{Status: Instantiated}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Group != "p/ca/v1/dig" || got.Status.Status != Instantiated || len(got.Placements) != 2 {
		t.Fatalf("context = %+v", got)
	}
	web := got.Placement("web", c1)
	if web == nil || len(web.Resources) != 3 || web.Resources[0].Name != "n" || web.Resources[2].Name != "a" {
		t.Fatalf("web placement (apply order kept) = %+v", web)
	}
	if st := web.StatusOf("ConfigMap/default/b"); st.Status != RsyncApplied {
		t.Fatalf("status of b = %+v", st)
	}
	if st := web.StatusOf("ConfigMap/default/a"); st.Status != RsyncPending {
		t.Fatalf("status of a = %+v", st)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Meta.ID != id || list[0].Status.Status != Instantiated {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if _, err := s.Get(ctx, "12345"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing context: %v", err)
	}
}

func TestIDsAndRefs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if seen[id] || id == "0" || id[0] == '-' {
			t.Fatalf("bad id %q", id)
		}
		seen[id] = true
	}
	ref, err := ParseClusterRef("prov+edge01")
	if err != nil || ref.String() != "prov+edge01" {
		t.Fatalf("ref = %v, %v", ref, err)
	}
	for _, bad := range []string{"x", "+c", "p+", "a+b+c"} {
		if _, err := ParseClusterRef(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseClusterRef(%q) = %v", bad, err)
		}
	}
}
