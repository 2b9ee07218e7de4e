package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	aaisink "github.com/argus-mc/argus/src/internal/aai"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// fakeAAI is an httptest AAI that checks every request the way AAI would:
// credentials, the headers AAI requires, the cloud region/tenant path,
// the k8s-resource body, and resource-version on updates and deletes.
type fakeAAI struct {
	t      *testing.T
	srv    *httptest.Server
	prefix string
	mu     sync.Mutex
	objs   map[string]aaisink.Resource
	rv     int
	bad    []string
}

func newFakeAAI(t *testing.T, owner, region, tenant string) *fakeAAI {
	a := &fakeAAI{t: t, objs: map[string]aaisink.Resource{},
		prefix: fmt.Sprintf("/aai/v24/cloud-infrastructure/cloud-regions/cloud-region/%s/%s/tenants/tenant/%s/k8s-resources/k8s-resource/", owner, region, tenant)}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAAI) refuse(w http.ResponseWriter, code int, why string) {
	a.bad = append(a.bad, why)
	http.Error(w, why, code)
}

func (a *fakeAAI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != "argus" || p != "pa55" {
		a.refuse(w, 401, "credentials")
		return
	}
	if r.Header.Get("X-FromAppId") == "" || r.Header.Get("X-TransactionId") == "" || r.Header.Get("Accept") != "application/json" {
		a.refuse(w, 400, "AAI headers missing")
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, a.prefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		a.refuse(w, 404, "path "+r.URL.Path)
		return
	}
	cur, exists := a.objs[id]
	switch r.Method {
	case http.MethodGet:
		if !exists {
			http.Error(w, "not found", 404)
			return
		}
		_ = json.NewEncoder(w).Encode(cur)
	case http.MethodPut:
		var obj aaisink.Resource
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &obj); err != nil || obj.ID != id || obj.Name == "" || obj.Kind == "" || obj.Version == "" {
			a.refuse(w, 400, "body "+string(body))
			return
		}
		if exists && obj.ResourceVersion != cur.ResourceVersion {
			a.refuse(w, 412, "stale resource-version on update of "+obj.Name)
			return
		}
		a.rv++
		obj.ResourceVersion = strconv.Itoa(a.rv)
		a.objs[id] = obj
		w.WriteHeader(map[bool]int{true: 200, false: 201}[exists])
	case http.MethodDelete:
		if !exists {
			http.Error(w, "not found", 404)
			return
		}
		if r.URL.Query().Get("resource-version") != cur.ResourceVersion {
			a.refuse(w, 412, "stale resource-version on delete")
			return
		}
		delete(a.objs, id)
		w.WriteHeader(204)
	default:
		a.refuse(w, 405, r.Method)
	}
}

func (a *fakeAAI) kinds() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for _, o := range a.objs {
		out[o.Kind]++
	}
	return out
}

func (a *fakeAAI) find(kind, name string) (aaisink.Resource, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.objs {
		if o.Kind == kind && o.Name == name {
			return o, true
		}
	}
	return aaisink.Resource{}, false
}

func waitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	waitCond(t, 60*time.Second, what, cond)
}

// TestInstanceSubscriptionAndAAI covers instance subscriptions and the AAI
// sink: a change is notified with the instance payload and mirrored into
// AAI; deleting the instance deletes its subscriptions, stops the POSTs
// and removes its objects from AAI.
func TestInstanceSubscriptionAndAAI(t *testing.T) {
	sharedClusters(t)
	startMonitors(t, sim)
	aai := newFakeAAI(t, "owner1", "region2", "tenant-7")
	pw := filepath.Join(t.TempDir(), "aai-password")
	if err := os.WriteFile(pw, []byte("pa55\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := startOrchestrator(t, testenv.UniqueName("aai"), "/"+testenv.UniqueName("aai"), func(opts *orchestrator.Options) {
		opts.NotifyBackoffBase = 100 * time.Millisecond
		opts.CallbackAllow = []string{"127.0.0.0/8"} // the test's receivers
		opts.AAI = orchestrator.AAIOptions{URL: aai.srv.URL + "/aai/v24", Username: "argus", PasswordFile: pw,
			Tenants: map[string]string{"region2": "tenant-7"}, SelfLink: "https://argus.example"}
	})
	cl := sim.Cluster("cluster2")
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "region2", "cloud-owner": "owner1"}, cl.Kubeconfig); code != 201 {
		t.Fatalf("connectivity-info: %d %s", code, body)
	}
	o.must(201, "POST", "/v1/rb/definition", map[string]any{"rb-name": "web", "rb-version": "v1", "chart-name": "frontend"})
	o.must(200, "POST", "/v1/rb/definition/web/v1/content", testenv.Archive(t, filepath.Join("testdata/charts", "frontend")))
	o.must(201, "POST", "/v1/rb/definition/web/v1/profile", map[string]any{"profile-name": "p1", "release-name": "aw", "namespace": "v1aai"})
	o.must(200, "POST", "/v1/rb/definition/web/v1/profile/p1/content", testenv.ArchiveFiles(t, map[string]string{
		"manifest.yaml": "version: v1\ntype:\n  values: values.yaml\n", "values.yaml": "message: aai\n"}))
	var inst catalog.InstanceSpec
	if err := json.Unmarshal([]byte(o.must(201, "POST", "/v1/instance", map[string]any{"rb-name": "web", "rb-version": "v1",
		"profile-name": "p1", "cloud-region": "region2"})), &inst); err != nil {
		t.Fatal(err)
	}
	o.waitContext(inst.ID, "instance Applied", allResources(appcontext.RsyncApplied))

	// AAI mirrors every resource of the instance, pods included.
	waitFor(t, "AAI holds the instance", func() (bool, string) {
		k := aai.kinds()
		return k["Deployment"] == 1 && k["Service"] == 1 && k["ConfigMap"] == 1 && k["Pod"] == 1, fmt.Sprint(k)
	})
	// The sink's record follows the live object: its labels may come with
	// a later update than the first record.
	waitFor(t, "AAI's Deployment record complete", func() (bool, string) {
		d, _ := aai.find("Deployment", "aw")
		ok := d.Group == "apps" && d.Version == "v1" && d.Namespace == "v1aai" && d.ID == aaisink.ID(inst.ID, "aw|_v1|region2|apps|v1|Deployment|v1aai|aw") &&
			strings.Contains(strings.Join(d.Labels, ","), "emco/deployment-id="+inst.ID+"-aw") &&
			strings.HasPrefix(d.SelfLink, "https://argus.example/v1/instance/"+inst.ID+"/query?")
		return ok, fmt.Sprintf("%+v", d)
	})

	subs := "/v1/instance/" + inst.ID + "/status/subscription"
	h := newHook(t, "ok")
	o.must(201, "POST", subs, map[string]any{"name": "so", "callback-url": h.url(), "metadata": map[string]any{"order": "42"}})
	o.must(400, "POST", subs, map[string]any{"name": "bad", "callback-url": h.url(), "app": []string{"x"}})
	if code, body := o.call("POST", subs, map[string]any{"name": "out", "callback-url": "http://169.254.169.254/cb"}); code != 400 || !strings.Contains(body, "link-local") {
		t.Fatalf("callback to a link-local address: %d %s", code, body)
	}
	start := scale(t, "cluster2", "v1aai", "aw", 2)
	p := h.waitPost(0, "the scaled Deployment", func(p post) bool { return entry(p.doc.Changes.Modified, "Deployment", "region2", "aw") != nil })
	t.Logf("instance: scale → callback %s", p.at.Sub(start).Round(time.Millisecond))
	if p.doc.InstanceID != inst.ID || p.doc.SubscriptionName != "so" || p.doc.Metadata["order"] != "42" || p.doc.Ready == nil {
		t.Fatalf("instance payload: %s", p.body)
	}
	e := entry(p.doc.Changes.Modified, "Deployment", "region2", "aw")
	if status, _ := e["status"].(map[string]any); status["kind"] != "Deployment" || e["ready-status"] == nil {
		t.Fatalf("entry is not resourcesStatus-shaped: %v", e)
	}
	waitFor(t, "AAI has the new pod", func() (bool, string) { k := aai.kinds(); return k["Pod"] == 2, fmt.Sprint(k) })

	// Deleting the instance: its subscriptions go, no POST follows, AAI is emptied.
	o.must(202, "DELETE", "/v1/instance/"+inst.ID, nil)
	after := len(mustPosts(h))
	o.must(404, "GET", subs+"/so", nil)
	waitFor(t, "AAI emptied", func() (bool, string) { k := aai.kinds(); return len(k) == 0, fmt.Sprint(k) })
	o.waitContext(inst.ID, "instance deleted", allResources(appcontext.RsyncDeleted))
	waitFor(t, "the instance's objects gone from the cluster", func() (bool, string) {
		_, err := cl.Clientset().AppsV1().Deployments("v1aai").Get(context.Background(), "aw", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	if n := len(mustPosts(h)); n != after {
		t.Fatalf("%d POSTs arrived after the instance was deleted", n-after)
	}
	aai.mu.Lock()
	defer aai.mu.Unlock()
	if len(aai.bad) > 0 {
		t.Fatalf("AAI refused requests: %v", aai.bad)
	}
}
