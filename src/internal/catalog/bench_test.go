package catalog

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
)

// bigCatalog is 10,000 composite apps in one project, and 10,000 apps and
// 10,000 profiles in one composite app and profile: the lists as long as
// they get, the collections as large as the benchmark asks.
type bigCatalog struct {
	db      *mongo.Database
	indexed *Catalog // with the etcd index
	plain   *Catalog // MongoDB alone, as before the index
	load    time.Duration
	build   time.Duration
}

const bigN = 10000

var (
	bigOnce sync.Once
	big     *bigCatalog
	bigErr  error
)

func bigKinds() []*Kind {
	return []*Kind{Projects, CompositeApps, Apps, CompositeProfiles, AppProfiles}
}

func loadBig(b *testing.B) *bigCatalog {
	bigOnce.Do(func() {
		ctx := context.Background()
		db := env.Mongo.Client.Database("bench" + fmt.Sprint(time.Now().UnixNano()))
		plain, err := prepare(ctx, db, bigKinds()...)
		if err != nil {
			bigErr = err
			return
		}
		start := time.Now()
		r := func(k *Kind, key Key, spec any) bson.D {
			return append(keyFilter(k, key), bson.E{Key: "metadata", Value: Metadata{Name: key.Name(), Description: "benchmark object " + key.Name()}},
				bson.E{Key: "spec", Value: spec})
		}
		insert := func(k *Kind, docs []any) {
			for i := 0; i < len(docs) && bigErr == nil; i += 1000 {
				_, bigErr = db.Collection(k.Collection).InsertMany(ctx, docs[i:min(i+1000, len(docs))])
			}
		}
		insert(Projects, []any{r(Projects, Key{"p"}, Empty{})})
		var cas, apps, profiles []any
		for i := range bigN {
			cas = append(cas, r(CompositeApps, Key{"p", fmt.Sprintf("ca%05d", i), "v1"}, CompositeAppSpec{Version: "v1"}))
			apps = append(apps, r(Apps, Key{"p", "ca00000", "v1", fmt.Sprintf("app%05d", i)}, Empty{}))
			profiles = append(profiles, r(AppProfiles, Key{"p", "ca00000", "v1", "cpf", fmt.Sprintf("prof%05d", i)}, AppProfileSpec{App: fmt.Sprintf("app%05d", i)}))
		}
		insert(CompositeApps, cas)
		insert(CompositeProfiles, []any{r(CompositeProfiles, Key{"p", "ca00000", "v1", "cpf"}, Empty{})})
		insert(Apps, apps)
		insert(AppProfiles, profiles)
		if bigErr != nil {
			return
		}
		loaded := time.Since(start)
		indexed, err := prepare(ctx, db, bigKinds()...)
		if err != nil {
			bigErr = err
			return
		}
		start = time.Now()
		if _, bigErr = indexed.useIndex(ctx, env.Etcd.Client, env.EtcdPrefix()); bigErr != nil {
			return
		}
		big = &bigCatalog{db: db, indexed: indexed, plain: plain, load: loaded, build: time.Since(start)}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return big
}

// latencies runs f n times and reports p50 and p99 in ms.
func latencies(b *testing.B, f func(i int) error) {
	b.Helper()
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if err := f(i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkCatalog10k measures gets, list pages and creates with 10,000
// composite apps, apps and profiles on the embedded FerretDB: with the
// etcd index (what the orchestrator runs) and, for comparison, MongoDB
// alone. Targets: a get ≤ 5 ms, a list page ≤ 20 ms.
//
//	go test ./src/internal/catalog -run '^$' -bench Catalog10k -benchtime 200x
func BenchmarkCatalog10k(b *testing.B) {
	bc := loadBig(b)
	b.Logf("loaded %d composite apps, apps and profiles in %s; index built in %s", bigN, bc.load.Round(time.Millisecond), bc.build.Round(time.Millisecond))
	ctx := context.Background()
	rnd := func() int { return rand.IntN(bigN) }
	for _, c := range []struct {
		name string
		cat  *Catalog
	}{{"indexed", bc.indexed}, {"mongo-only", bc.plain}} {
		cas := For[CompositeAppSpec](c.cat, CompositeApps)
		apps := For[Empty](c.cat, Apps)
		profiles := For[AppProfileSpec](c.cat, AppProfiles)
		b.Run(c.name+"/get-composite-app", func(b *testing.B) {
			latencies(b, func(int) error { _, err := cas.Get(ctx, Key{"p", fmt.Sprintf("ca%05d", rnd()), "v1"}); return err })
		})
		b.Run(c.name+"/get-app", func(b *testing.B) {
			latencies(b, func(int) error {
				_, err := apps.Get(ctx, Key{"p", "ca00000", "v1", fmt.Sprintf("app%05d", rnd())})
				return err
			})
		})
		b.Run(c.name+"/get-profile", func(b *testing.B) {
			latencies(b, func(int) error {
				_, err := profiles.Get(ctx, Key{"p", "ca00000", "v1", "cpf", fmt.Sprintf("prof%05d", rnd())})
				return err
			})
		})
		b.Run(c.name+"/list-page-100-apps", func(b *testing.B) {
			latencies(b, func(int) error {
				after := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("app%05d", rnd())))
				p, err := apps.ListPage(ctx, Key{"p", "ca00000", "v1"}, after, 100)
				if err == nil && len(p.Items) == 0 {
					err = fmt.Errorf("an empty page")
				}
				return err
			})
		})
		b.Run(c.name+"/list-page-100-composite-apps", func(b *testing.B) {
			latencies(b, func(int) error {
				after := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("ca%05d v1", rnd())))
				_, err := cas.ListPage(ctx, Key{"p"}, after, 100)
				return err
			})
		})
		b.Run(c.name+"/create-app", func(b *testing.B) {
			start := time.Now()
			n := 0
			latencies(b, func(i int) error {
				n++
				return apps.Create(ctx, Key{"p", "ca00000", "v1", fmt.Sprintf("new-%s-%d-%d", c.name, time.Now().UnixNano(), i)},
					Object[Empty]{Metadata: Metadata{Name: "x"}})
			})
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "creates/s")
		})
	}
	b.Run("indexed/list-all-10k-apps", func(b *testing.B) {
		apps := For[Empty](bc.indexed, Apps)
		latencies(b, func(int) error { _, err := apps.List(ctx, Key{"p", "ca00000", "v1"}); return err })
	})
}
