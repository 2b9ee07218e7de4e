package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// seedDIGs stores n DIGs under project p, composite app ca v1, each
// instantiated: the DIG's document as the catalogue writes it (the first
// through the catalogue, the others copies of its document, inserted in
// batches), its lifecycle document as Transition writes it, and a context
// of one app with two resources on one cluster (appcontext.Store.Create).
// The stores are then as n instantiations leave them, faster than n
// instantiations would, whose cost is not what is measured.
func seedDIGs(tb testing.TB, ctx context.Context, db string, prefix string, n int) {
	tb.Helper()
	mdb := env.Mongo.Client.Database(db)
	cat, _, err := catalog.Open(ctx, catalog.Options{DB: mdb})
	if err != nil {
		tb.Fatal(err)
	}
	if err := catalog.For[catalog.Empty](cat, catalog.Projects).Create(ctx, catalog.Key{"p"}, catalog.Object[catalog.Empty]{Metadata: catalog.Metadata{Name: "p"}}); err != nil {
		tb.Fatal(err)
	}
	if err := catalog.For[catalog.CompositeAppSpec](cat, catalog.CompositeApps).Create(ctx, catalog.Key{"p", "ca", "v1"},
		catalog.Object[catalog.CompositeAppSpec]{Metadata: catalog.Metadata{Name: "ca"}, Spec: catalog.CompositeAppSpec{Version: "v1"}}); err != nil {
		tb.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("dig-%05d", i) }
	if err := catalog.For[catalog.DIGSpec](cat, catalog.DeploymentIntentGroups).Create(ctx, catalog.Key{"p", "ca", "v1", name(0)},
		catalog.Object[catalog.DIGSpec]{Metadata: catalog.Metadata{Name: name(0)}, Spec: catalog.DIGSpec{CompositeProfile: "cpf", Version: "v1"}}); err != nil {
		tb.Fatal(err)
	}
	var first bson.D
	if err := mdb.Collection(catalog.DeploymentIntentGroups.Collection).FindOne(ctx, bson.D{}).Decode(&first); err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, n)
	var digs, states []any
	now := time.Now().UTC()
	for i := range n {
		ids[i] = appcontext.NewID()
		if i > 0 {
			digs = append(digs, renamed(first, name(0), name(i)))
		}
		actions := []catalog.StateAction{{State: catalog.StateApproved, TimeStamp: now},
			{State: catalog.StateInstantiated, ContextID: ids[i], TimeStamp: now, Revision: 1}}
		states = append(states, bson.D{{Key: "group", Value: catalog.DIGGroup(catalog.Key{"p", "ca", "v1", name(i)})},
			{Key: "current", Value: catalog.StateInstantiated}, {Key: "actions", Value: actions}, {Key: "contextId", Value: ids[i]},
			{Key: "statusContextId", Value: ids[i]}, {Key: "contexts", Value: []string{ids[i]}}})
	}
	for _, c := range []struct {
		coll string
		docs []any
	}{{catalog.DeploymentIntentGroups.Collection, digs}, {"lifecycle", states}} {
		for start := 0; start < len(c.docs); start += 500 {
			if _, err := mdb.Collection(c.coll).InsertMany(ctx, c.docs[start:min(start+500, len(c.docs))]); err != nil {
				tb.Fatal(err)
			}
		}
	}
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: prefix})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				meta, st, placements := digContext(ids[i], name(i), now)
				if err := store.Create(ctx, meta, st, placements); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
}

// renamed copies a DIG document under another name (no _id: a new one).
func renamed(doc bson.D, from, to string) bson.D {
	out := make(bson.D, 0, len(doc))
	for _, e := range doc {
		switch v := e.Value.(type) {
		case string:
			if v == from {
				e.Value = to
			}
		case bson.D:
			e.Value = renamed(v, from, to)
		}
		if e.Key != "_id" {
			out = append(out, e)
		}
	}
	return out
}

// digContext is an instantiated context of one app with a ConfigMap and
// a Service on cluster cp+c1.
func digContext(id, dig string, now time.Time) (appcontext.Meta, appcontext.Status, []*appcontext.Placement) {
	meta := appcontext.Meta{ID: id, Kind: "dig", Group: catalog.DIGGroup(catalog.Key{"p", "ca", "v1", dig}), Project: "p",
		CompositeApp: "ca", Version: "v1", DIG: dig, Namespace: "default", StatusID: id, Created: now}
	res := func(kind, name string) appcontext.Resource {
		return appcontext.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: kind}, Name: name,
			Manifest: json.RawMessage(fmt.Sprintf(`{"apiVersion":"v1","kind":%q,"metadata":{"name":%q}}`, kind, name))}
	}
	p := &appcontext.Placement{App: "app", Cluster: appcontext.ClusterRef{Provider: "cp", Name: "c1"},
		Resources: []appcontext.Resource{res("ConfigMap", dig+"-cm"), res("Service", dig+"-svc")}}
	return meta, appcontext.Status{Status: appcontext.Instantiated}, []*appcontext.Placement{p}
}

// Issue 23: GET /v2/overview read each DIG's state from FerretDB, a
// collection scan each: with 1,335 DIGs it took 50 s. It is now served from
// memory (the catalogue's index and the contexts, both fed by the
// cache's watch): 1,500 instantiated DIGs answer within 1 s (asserted
// loosely, at 5 s).
func TestOverviewOf1500DIGs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, prefix := testenv.UniqueName("ov"), env.EtcdPrefix()
	begin := time.Now()
	seedDIGs(t, ctx, db, prefix, 1500)
	t.Logf("seeded 1,500 instantiated DIGs in %s", time.Since(begin).Round(time.Millisecond))
	r := start(t, Options{DataDir: t.TempDir(), EtcdEndpoints: env.EtcdEndpoints(), MongoURI: env.MongoURI(), MongoDatabase: db, EtcdPrefix: prefix})
	var took time.Duration
	for range 3 {
		start := time.Now()
		code, body := r.call(t, "GET", "/v2/overview", "")
		took = time.Since(start)
		if code != 200 {
			t.Fatalf("overview: %d %.300s", code, body)
		}
		var ov struct {
			DIGs []struct {
				Name, State, Status string
				Total               int `json:"total"`
			} `json:"deploymentIntentGroups"`
		}
		if err := json.Unmarshal([]byte(body), &ov); err != nil {
			t.Fatal(err)
		}
		if len(ov.DIGs) != 1500 || ov.DIGs[0].Name != "dig-00000" || ov.DIGs[0].State != "Instantiated" || ov.DIGs[0].Status != "Instantiated" || ov.DIGs[0].Total != 2 {
			t.Fatalf("overview of %d DIGs; first %+v", len(ov.DIGs), ov.DIGs[0])
		}
	}
	t.Logf("GET /v2/overview with 1,500 DIGs answered in %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("the overview took %s, want about 1s", took)
	}
	// A lifecycle change shows at once.
	if code, body := r.call(t, "POST", "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/dig-00001/terminate", ""); code != 202 {
		t.Fatalf("terminate: %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := r.call(t, "GET", "/v2/overview", "")
		var ov struct {
			DIGs []struct{ Name, State string } `json:"deploymentIntentGroups"`
		}
		_ = json.Unmarshal([]byte(body), &ov)
		if len(ov.DIGs) > 1 && ov.DIGs[1].State == "Terminated" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminated DIG's state did not show: %+v", ov.DIGs[1])
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

// BenchmarkOverview10000DIGs is the overview's own cost (status.Reader.
// Overview, as GET /v2/overview computes it before encoding) with 10,000
// instantiated DIGs, read from memory: the catalogue's index mirrored and
// the contexts cached, both fed by one etcd watch. Target: 100 ms.
// ARGUS_OVERVIEW_DIGS changes the number.
func BenchmarkOverview10000DIGs(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("ARGUS_OVERVIEW_DIGS")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, prefix := testenv.UniqueName("ovb"), env.EtcdPrefix()
	seedDIGs(b, ctx, db, prefix, n)
	cat, _, err := catalog.Open(ctx, catalog.Options{DB: env.Mongo.Client.Database(db), Index: env.Etcd.Client, IndexPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: prefix})
	cache := appcontext.NewCache(store, nil)
	mirror := catalog.NewMirror(prefix)
	cache.Follow(mirror.Prefix(), mirror)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := cache.WaitLoaded(ctx); err != nil {
		b.Fatal(err)
	}
	reader := &status.Reader{Catalog: cat, Contexts: store, Cache: cache, Mirror: mirror}
	cpu0 := cpuTime()
	for b.Loop() {
		ov, err := reader.Overview(ctx)
		if err != nil || len(ov.DeploymentIntentGroups) != n {
			b.Fatalf("%d DIGs, %v", len(ov.DeploymentIntentGroups), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/overview")
	// The process's CPU time, garbage collection included, tells the cost
	// apart from the waits of a loaded machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/overview")
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
