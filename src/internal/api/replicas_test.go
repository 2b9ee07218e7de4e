package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// fakeConsistency records what it was asked.
type fakeConsistency struct {
	mu     sync.Mutex
	rev    int64
	waited []int64
}

func (f *fakeConsistency) Revision(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	return f.rev, nil
}

func (f *fakeConsistency) WaitRevision(_ context.Context, rev int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waited = append(f.waited, rev)
	return nil
}

func (f *fakeConsistency) calls() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.waited...)
}

type replicaList []Replica

func (l replicaList) Replicas(context.Context) ([]Replica, error) { return l, nil }

type failingReplicas struct{}

func (failingReplicas) Replicas(context.Context) ([]Replica, error) {
	return nil, errors.New("etcd down")
}

// A request that may write is answered once this replica's caches reached
// the store's revision, which the answer names; a request naming a
// revision waits for it first; reads alone wait for nothing.
func TestReadYourWrites(t *testing.T) {
	c := &fakeConsistency{}
	f := newFixtureWith(t, func(o *Options) { o.Consistency = c })
	code, _, h := f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`)
	if code != 201 || h.Get(RevisionHeader) != "1" {
		t.Fatalf("create: %d, %s = %q", code, RevisionHeader, h.Get(RevisionHeader))
	}
	if got := c.calls(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("waited for %v, want [1]", got)
	}
	code, _, h = f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`)
	if code != 409 || h.Get(RevisionHeader) != "2" {
		t.Fatalf("a refused write still names the revision: %d %q", code, h.Get(RevisionHeader))
	}
	if code, _, h = f.do(t, "GET", "/v2/projects/p1", ""); code != 200 || h.Get(RevisionHeader) != "" || len(c.calls()) != 2 {
		t.Fatalf("a read: %d %q, waits %v", code, h.Get(RevisionHeader), c.calls())
	}
	code, _, _ = f.send(t, "GET", "/v2/projects/p1", nil, map[string]string{MinRevisionHeader: "2"})
	if got := c.calls(); code != 200 || got[len(got)-1] != 2 {
		t.Fatalf("a read naming revision 2: %d, waits %v", code, got)
	}
	// A revision the store has not reached is waited for only up to the
	// store's own (4 by now).
	code, _, _ = f.send(t, "GET", "/v2/projects/p1", nil, map[string]string{MinRevisionHeader: "42"})
	if got := c.calls(); code != 200 || got[len(got)-1] != 4 {
		t.Fatalf("a read naming revision 42: %d, waits %v", code, got)
	}
	f.send(t, "GET", "/v2/projects/p1", nil, map[string]string{MinRevisionHeader: "not-a-number"})
	if len(c.calls()) != 4 {
		t.Fatalf("a malformed revision was waited for: %v", c.calls())
	}
}

func TestReplicasRoute(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFixtureWith(t, func(o *Options) {
		o.Replicas = replicaList{{ID: "r1", URL: "http://10.0.0.1:9015", Started: started, LeaseExpires: started.Add(10 * time.Second),
			Clusters: []string{"cp+c1"}, Subscriptions: []string{"dig/p/ca/v1/d/s"}, DIGs: []string{"p/ca/v1/d"}, Instances: []string{}}}
	})
	code, body, _ := f.do(t, "GET", "/v2/system/replicas", "")
	var got map[string][]map[string]any
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("%d %s %v", code, body, err)
	}
	r := got["replicas"][0]
	for _, k := range []string{"id", "url", "started", "lease-expires", "clusters", "subscriptions", "digs", "instances"} {
		if _, ok := r[k]; !ok {
			t.Errorf("replica lacks %q: %s", k, body)
		}
	}
	if r["lease-expires"] != "2026-01-02T03:04:15Z" || r["clusters"].([]any)[0] != "cp+c1" {
		t.Errorf("replica: %s", body)
	}
	down := newFixtureWith(t, func(o *Options) { o.Replicas = failingReplicas{} })
	if code, _, _ := down.do(t, "GET", "/v2/system/replicas", ""); code != 500 {
		t.Fatalf("etcd down: %d", code)
	}
	if code, _, _ := f.do(t, "POST", "/v2/system/replicas", ""); code != 405 {
		t.Fatalf("POST: %d", code)
	}
}

// Lists come a page at a time when asked (?limit=, ?continue= from the
// Link header), with the catalogue's index and without.
func TestListPages(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		f := newFixtureWith(t, func(o *Options) {
			if !indexed {
				return
			}
			cat, _, err := catalog.Open(context.Background(), catalog.Options{DB: env.Database(t), Index: env.Etcd.Client, IndexPrefix: env.EtcdPrefix()})
			if err != nil {
				t.Fatal(err)
			}
			o.Catalog = cat
		})
		if code, body, _ := f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p"}}`); code != 201 {
			t.Fatalf("%d %s", code, body)
		}
		for _, n := range []string{"e", "a", "c", "b", "d"} {
			if code, body, _ := f.do(t, "POST", "/v2/projects/p/composite-apps", `{"metadata":{"name":"`+n+`"},"spec":{"compositeAppVersion":"v1"}}`); code != 201 {
				t.Fatalf("%d %s", code, body)
			}
		}
		var names []string
		path := "/v2/projects/p/composite-apps?limit=2"
		for pages := 0; path != ""; pages++ {
			code, body, h := f.do(t, "GET", path, "")
			var objs []struct {
				Metadata struct{ Name string } `json:"metadata"`
			}
			if err := json.Unmarshal([]byte(body), &objs); code != 200 || err != nil || pages > 3 || len(objs) > 2 {
				t.Fatalf("indexed=%v page %d: %d %s %v", indexed, pages, code, body, err)
			}
			for _, o := range objs {
				names = append(names, o.Metadata.Name)
			}
			path = ""
			if link := h.Get("Link"); link != "" {
				path = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
			}
		}
		if strings.Join(names, ",") != "a,b,c,d,e" {
			t.Fatalf("indexed=%v: pages gave %v", indexed, names)
		}
		if code, body, h := f.do(t, "GET", "/v2/projects/p/composite-apps", ""); code != 200 || h.Get("Link") != "" || strings.Count(body, `"name"`) != 5 {
			t.Fatalf("indexed=%v: the whole list: %d %s", indexed, code, body)
		}
		for _, bad := range []string{"0", "x", "10001"} {
			if code, _, _ := f.do(t, "GET", "/v2/projects/p/composite-apps?limit="+bad, ""); code != 400 {
				t.Errorf("limit=%s: %d, want 400", bad, code)
			}
		}
		if code, _, _ := f.do(t, "GET", "/v2/projects/p/composite-apps?continue=!!", ""); code != 400 {
			t.Errorf("a bad continue token: %d, want 400", code)
		}
	}
}

// A list page is cut short past its share of the answer budget, whatever
// ?limit= says: a thousand objects of the largest size were read, decoded
// and encoded whole before the budget could refuse the answer.
func TestListPagesAreBoundedInBytes(t *testing.T) {
	f := smallPagesFixture(t)
	if code, body, _ := f.do(t, "POST", "/v2/projects", `{"metadata":{"name":"p"}}`); code != 201 {
		t.Fatalf("%d %s", code, body)
	}
	desc := strings.Repeat("d", 40<<10)
	for i := range 12 {
		body := fmt.Sprintf(`{"metadata":{"name":"ca%02d","description":%q},"spec":{"compositeAppVersion":"v1"}}`, i, desc)
		if code, body, _ := f.do(t, "POST", "/v2/projects/p/composite-apps", body); code != 201 {
			t.Fatalf("%d %s", code, body)
		}
	}
	seen, pages := 0, 0
	for path := "/v2/projects/p/composite-apps?limit=1000"; path != ""; pages++ {
		code, body, h := f.do(t, "GET", path, "")
		n := strings.Count(body, `"compositeAppVersion"`)
		if code != 200 || n == 0 || len(body) > 200<<10 || pages > 12 {
			t.Fatalf("page %d: %d, %d objects in %d bytes", pages, code, n, len(body))
		}
		seen += n
		path = ""
		if link := h.Get("Link"); link != "" {
			path = strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
		}
	}
	if seen != 12 || pages < 4 {
		t.Fatalf("%d objects in %d pages, want 12 in pages of at most 128 KiB", seen, pages)
	}
}

// The v1 lists, which k8splugin never pages, are read a page at a time
// and encoded as they are read, whole and in order: a request holds one
// page of the catalogue, not the whole list.
func TestV1ListsAreStreamed(t *testing.T) {
	f := smallPagesFixture(t)
	desc := strings.Repeat("d", 40<<10)
	var want []string
	for i := range 12 {
		name := fmt.Sprintf("rb%02d", i)
		for _, v := range []string{"v1", "v2"} {
			body := fmt.Sprintf(`{"rb-name":%q,"rb-version":%q,"description":%q}`, name, v, desc)
			if code, got, _ := f.do(t, "POST", "/v1/rb/definition", body); code != 201 {
				t.Fatalf("%d %s", code, got)
			}
			want = append(want, name+"/"+v)
		}
	}
	names := func(path string) []string {
		code, body, _ := f.do(t, "GET", path, "")
		var defs []struct {
			Name    string `json:"rb-name"`
			Version string `json:"rb-version"`
		}
		if err := json.Unmarshal([]byte(body), &defs); code != 200 || err != nil {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
		var out []string
		for _, d := range defs {
			out = append(out, d.Name+"/"+d.Version)
		}
		return out
	}
	if got := names("/v1/rb/definition"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("all definitions: %v", got)
	}
	if got := names("/v1/rb/definition/rb07"); strings.Join(got, ",") != "rb07/v1,rb07/v2" {
		t.Fatalf("one definition's versions: %v", got)
	}
	if code, body, _ := f.do(t, "GET", "/v1/rb/definition/rb07/v1/profile", ""); code != 200 || strings.Count(body, `"profile-name"`) != 1 {
		t.Fatalf("its default profile: %d %q", code, body)
	}
	if code, body, _ := f.do(t, "GET", "/v1/instance?rb-name=rb07", ""); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("no instances: %d %q", code, body)
	}
	if code, _, _ := f.do(t, "GET", "/v1/rb/definition/none/v1/profile", ""); code != 404 {
		t.Fatalf("profiles of no definition: %d, want 404", code)
	}
}

// smallPagesFixture serves an indexed catalogue with an answer budget of
// 1 MiB, so list pages end past 128 KiB.
func smallPagesFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, func(o *Options) {
		cat, _, err := catalog.Open(context.Background(), catalog.Options{DB: env.Database(t), Index: env.Etcd.Client, IndexPrefix: env.EtcdPrefix()})
		if err != nil {
			t.Fatal(err)
		}
		o.Catalog, o.MaxAnswerMemory = cat, 1<<20
	})
}
