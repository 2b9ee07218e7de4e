package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// waitCall polls a call until it answers want (deadline 60s).
func (r *running) waitCall(t *testing.T, method, path, body string, want int, what string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, resp := r.call(t, method, path, body)
		if code == want {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s %s answers %d %s, want %d", what, method, path, code, resp, want)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
}

// With etcd out of space (live data past a tiny quota), the orchestrator
// starts, serves reads, refuses changes with 503 and says why in /readyz;
// raising the quota and restarting is the way out: the alarm is disarmed
// at start-up.
func TestStartsAndServesReadsWithEtcdOutOfSpace(t *testing.T) {
	dir := t.TempDir()
	const quota = 16 << 20
	opts := Options{DataDir: dir, Etcd: EtcdOptions{QuotaBytes: quota, MaintainInterval: 200 * time.Millisecond}}
	r := start(t, opts)
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	r.stop(t)

	// Fill etcd with live data until it raises NOSPACE.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := etcdstore.Open(ctx, etcdstore.Options{DataDir: dir, QuotaBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	// Compacting and defragmenting as it fills keeps the file close to
	// the live data, so the alarm comes with live data near the quota,
	// past what the orchestrator's maintenance may clear (four fifths):
	// without it, the alarm could come early, from free pages, and the
	// orchestrator would rightly clear it at start-up.
	val := strings.Repeat("x", 256<<10)
	ep := st.Client.Endpoints()[0]
	for i := 0; ; i++ {
		if i%4 == 3 {
			resp, err := st.Client.Status(ctx, ep)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Client.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Client.Defragment(ctx, ep); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Client.Put(ctx, fmt.Sprintf("/filler/%04d", i), val); err != nil {
			if !errors.Is(err, rpctypes.ErrNoSpace) {
				t.Fatal(err)
			}
			t.Logf("etcd out of space after %d values of 256 KiB (quota %d MiB)", i, quota>>20)
			break
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	start0 := time.Now()
	r = start(t, opts)
	t.Logf("started with the NOSPACE alarm raised in %s", time.Since(start0).Round(time.Millisecond))
	body := r.waitCall(t, "GET", "/readyz", "", 503, "readiness under NOSPACE")
	if !strings.Contains(body, "etcd-space") || !strings.Contains(body, "NOSPACE") || !strings.Contains(body, "--etcd-quota-bytes") {
		t.Fatalf("readyz under NOSPACE: %s", body)
	}
	if code, body := r.call(t, "GET", "/v2/projects/p1", ""); code != 200 {
		t.Fatalf("read under NOSPACE: %d %s", code, body)
	}
	if code, body := r.call(t, "GET", "/v2/projects", ""); code != 200 || !strings.Contains(body, "p1") {
		t.Fatalf("list under NOSPACE: %d %s", code, body)
	}
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"p2"}}`); code != 503 || !strings.Contains(body, "NOSPACE") {
		t.Fatalf("write under NOSPACE: %d %s, want 503 naming NOSPACE", code, body)
	}
	r.stop(t)

	opts.Etcd.QuotaBytes = 64 << 20
	r = start(t, opts)
	r.waitCall(t, "GET", "/readyz", "", 200, "readiness with a larger quota")
	r.waitCall(t, "POST", "/v2/projects", `{"metadata":{"name":"p2"}}`, 201, "write with a larger quota")
}

// onSharedStores starts an orchestrator on the package's stores, with a
// database and prefix of its own.
func onSharedStores(t testing.TB, mod func(*Options)) *running {
	o := Options{DataDir: "unused", EtcdEndpoints: env.EtcdEndpoints(), MongoURI: env.MongoURI(),
		MongoDatabase: testenv.UniqueName("space"), EtcdPrefix: env.EtcdPrefix()}
	if mod != nil {
		mod(&o)
	}
	return start(t, o)
}

func describe(name string, n int) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"description":%q}}`, name, strings.Repeat("d", n))
}

func dbSize(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := env.Etcd.Client.Status(ctx, env.EtcdEndpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	return st.DbSize
}

// A description of about a MiB, on a project, a composite app or in an
// upload's metadata, is refused with 413 naming the limit, however often
// it is sent, and nothing of it reaches etcd; a project's objects stop at
// the project's limit.
func TestLargeObjectsAreRefused(t *testing.T) {
	r := onSharedStores(t, func(o *Options) { o.CatalogLimits.MaxProjectBytes = 64 << 10 })
	big := describe("p1", 1<<20-200) // just under the JSON body limit
	if code, body := r.call(t, "POST", "/v2/projects", big); code != 413 || !strings.Contains(body, "--catalog-max-object-bytes") {
		t.Fatalf("create with a 1 MiB description: %d %.200s", code, body)
	}
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	before := dbSize(t)
	for i := 0; i < 50; i++ {
		if code, body := r.call(t, "PUT", "/v2/projects/p1", big); code != 413 {
			t.Fatalf("PUT %d with a 1 MiB description: %d %.200s", i, code, body)
		}
	}
	if grew := dbSize(t) - before; grew > 1<<20 {
		t.Fatalf("etcd grew by %d bytes under refused writes", grew)
	}
	if code, body := r.call(t, "PUT", "/v2/projects/p1", describe("p1", 1<<20)); code != 413 {
		t.Fatalf("PUT of a body past the JSON limit: %d %.200s", code, body)
	}
	if code, body := r.call(t, "POST", "/v2/projects/p1/composite-apps",
		`{"metadata":{"name":"ca","description":"`+strings.Repeat("d", 300<<10)+`"},"spec":{"compositeAppVersion":"v1"}}`); code != 413 {
		t.Fatalf("composite app with a 300 KiB description: %d %.200s", code, body)
	}
	// The project's limit: composite apps of 20 KiB each until it is full.
	var code int
	var body string
	for i := 0; i < 10; i++ {
		code, body = r.call(t, "POST", "/v2/projects/p1/composite-apps",
			fmt.Sprintf(`{"metadata":{"name":"ca%d","description":%q},"spec":{"compositeAppVersion":"v1"}}`, i, strings.Repeat("d", 20<<10)))
		if code != 201 {
			break
		}
	}
	if code != 413 || !strings.Contains(body, "--catalog-max-project-bytes") {
		t.Fatalf("past the project's limit: %d %s", code, body)
	}
}

// Writes under every limit, repeated until their history is twice etcd's
// quota, never leave etcd full: the maintenance loop compacts past half
// the quota (and, were a burst to outrun it, clears the NOSPACE alarm
// once compaction made room). A PUT answered 503 is retried, as a client
// told Retry-After would; each counts.
func TestRewritesNeverFillEtcd(t *testing.T) {
	const quota = 16 << 20
	r := start(t, Options{DataDir: t.TempDir(), Etcd: EtcdOptions{QuotaBytes: quota, MaintainInterval: 100 * time.Millisecond}})
	if code, body := r.call(t, "POST", "/v2/projects", `{"metadata":{"name":"p1"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	body := describe("p1", 200<<10)
	refused := 0
	for i := 0; i < 2*quota/(200<<10); i++ {
		for try := 0; ; try++ {
			code, resp := r.call(t, "PUT", "/v2/projects/p1", body)
			if code == 200 {
				break
			}
			if code != 503 || try == 100 {
				t.Fatalf("PUT %d: %d %.300s", i, code, resp)
			}
			refused++
			time.Sleep(100 * time.Millisecond) // Retry-After, shortened
		}
	}
	t.Logf("%d PUTs of a 200 KiB description (%d MiB of history, quota %d MiB): %d answered 503 first",
		2*quota/(200<<10), 2*quota>>20, quota>>20, refused)
	r.waitCall(t, "GET", "/readyz", "", 200, "readiness after the rewrites")
}
