package appcontext

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// revisionPlan is app web's five ConfigMaps at version on each cluster.
func revisionPlan(version string, clusters ...ClusterRef) []*Placement {
	cm := func(name string) Resource {
		return Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Name: name, Namespace: "default",
			Manifest: json.RawMessage(`{"kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"v":"` + version + strings.Repeat("x", 300) + `"}}`)}
	}
	var out []*Placement
	for _, c := range clusters {
		var rs []Resource
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			rs = append(rs, cm(n))
		}
		out = append(out, &Placement{App: "web", Cluster: c, Resources: rs})
	}
	return out
}

// putUpdate updates the context to p and records it as revision n,
// keeping two; it returns the store's revision before the update.
func putUpdate(ctx context.Context, t *testing.T, s *Store, id string, n int64, p []*Placement) int64 {
	t.Helper()
	since, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(ctx, id, p, nil, Status{Status: Updating}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRevision(ctx, id, NewRevision(n, RevisionUpdate, p), 2, since); err != nil {
		t.Fatal(err)
	}
	return since
}

// Revisions keep a context's desired states for rollback: read back with
// their manifests, the newest keep of them, and the manifests only pruned
// revisions used deleted with them (those the context or a kept revision
// uses stay, and so does anything written after the update began).
func TestRevisionsAreKeptBoundedAndPruneManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A small request limit, so a revision spans several chunks.
	s := New(Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix(), MaxRequestBytes: 4096})
	id := NewID()
	c1, c2 := ClusterRef{"cp", "c1"}, ClusterRef{"cp", "c2"}
	since, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p1 := revisionPlan("one", c1, c2)
	if err := s.Create(ctx, Meta{ID: id, Kind: "dig", Group: "g", StatusID: id, Namespace: "default", Created: time.Now()}, Status{Status: Instantiating}, p1); err != nil {
		t.Fatal(err)
	}
	rev1 := NewRevision(1, RevisionInstantiate, p1)
	rev1.Intents = json.RawMessage(`{"why":"first"}`)
	rev1.Dependencies = map[string][]Dependency{"web": {{App: "db", OpStatus: OpStatusReady, Wait: 2 * time.Second}}}
	if err := s.PutRevision(ctx, id, rev1, 2, since); err != nil {
		t.Fatal(err)
	}
	// Two updates, each with new manifests, on c1 only.
	putUpdate(ctx, t, s, id, 2, revisionPlan("two", c1))
	putUpdate(ctx, t, s, id, 3, revisionPlan("three", c1))
	nums, err := s.Revisions(ctx, id)
	if err != nil || len(nums) != 2 || nums[0] != 2 || nums[1] != 3 {
		t.Fatalf("kept revisions %v %v, want [2 3] (limit 2)", nums, err)
	}
	if _, err := s.Revision(ctx, id, 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revision 1 after the trim: %v, want NotFound", err)
	}
	rev, err := s.Revision(ctx, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	ps := rev.AsPlacements()
	if rev.Action != RevisionUpdate || len(ps) != 1 || ps[0].Cluster != c1 || len(ps[0].Resources) != 5 ||
		!strings.Contains(string(ps[0].Resources[0].Manifest), `"v":"two`) || ps[0].Resources[0].ManifestRef != nil {
		t.Fatalf("revision 2 read back: %+v", rev)
	}
	// Revision 1's manifests ("one") are still used by c2's resources,
	// which the updates did not touch: kept. None of revision 2's or 3's
	// is pruned.
	blobs, err := s.blobs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 15 {
		t.Fatalf("%d manifests stored, want 15 (5 per version, all still used)", len(blobs))
	}
	// A fourth revision drops revision 2: its manifests, used by nothing
	// else now, go; the context still reads whole.
	since = putUpdate(ctx, t, s, id, 4, revisionPlan("four", c1))
	if blobs, _ = s.blobs(ctx, id); len(blobs) != 15 {
		t.Fatalf("%d manifests after revision 4, want 15 (one, three, four)", len(blobs))
	}
	c, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if m := string(c.Placement("web", c2).Resources[0].Manifest); !strings.Contains(m, `"v":"one`) {
		t.Fatalf("c2 after the prune: %s", m)
	}
	if _, err := s.Revision(ctx, id, 3); err != nil {
		t.Fatalf("revision 3 after the prune: %v", err)
	}
	// A manifest written after since is never pruned, used or not.
	late := s.blobRef([]byte(`{"late":true}`))
	if _, err := env.Etcd.Client.Put(ctx, s.blobPrefix(id)+late.SHA256+"/0", `{"late":true}`); err != nil {
		t.Fatal(err)
	}
	if err := s.pruneBlobs(ctx, id, since); err != nil {
		t.Fatal(err)
	}
	if resp, _ := env.Etcd.Client.Get(ctx, s.blobPrefix(id)+late.SHA256+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 1 {
		t.Fatal("a manifest written after since was pruned")
	}
	// Terminated: the revisions go, the context stays readable.
	if err := s.DeleteRevisions(ctx, id); err != nil {
		t.Fatal(err)
	}
	if nums, err := s.Revisions(ctx, id); err != nil || len(nums) != 0 {
		t.Fatalf("revisions after DeleteRevisions: %v %v", nums, err)
	}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
}
