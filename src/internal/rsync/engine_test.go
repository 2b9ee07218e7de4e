package rsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

var errInvalidKubeconfig = errdefs.Invalid("the kubeconfig's server address is refused")

func metav1Status(code int32, msg string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}
}

var c1 = appcontext.ClusterRef{Provider: "cp", Name: "c1"}

// coreKinds is what every fake cluster serves.
func coreKinds() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: append(apiResources("v1", true, map[string]string{"ConfigMap": "configmaps"}).APIResources,
			apiResources("v1", false, map[string]string{"Namespace": "namespaces"}).APIResources...)},
		apiResources("apps/v1", true, map[string]string{"DaemonSet": "daemonsets"}),
	}
}

func manifest(apiVersion, kind, name, ns string, extra map[string]any) appcontext.Resource {
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
	if ns != "" {
		obj["metadata"].(map[string]any)["namespace"] = ns
	}
	for k, v := range extra {
		obj[k] = v
	}
	data, _ := json.Marshal(obj)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return appcontext.Resource{GVK: gv.WithKind(kind), Name: name, Namespace: ns, Manifest: data}
}

// newTestEngine returns an engine on the test's etcd prefix with fast
// retries, and a store to read what it recorded.
func newTestEngine(t *testing.T, clusters Clusters, mode string) (*Engine, *appcontext.Store) {
	t.Helper()
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	e, err := New(Options{Store: store, Clusters: clusters, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		WaitBase: 20 * time.Millisecond, WaitMax: 100 * time.Millisecond, FieldValidation: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, store
}

func createContext(t *testing.T, store *appcontext.Store, rs ...appcontext.Resource) string {
	t.Helper()
	id := appcontext.NewID()
	meta := appcontext.Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Namespace: "default", Created: time.Now().UTC()}
	if err := store.Create(context.Background(), meta, appcontext.Status{Status: appcontext.Instantiating},
		[]*appcontext.Placement{{App: "app", Cluster: c1, Resources: rs}}); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFor polls the context until cond holds (deadline 30 s).
func waitFor(t *testing.T, store *appcontext.Store, id, what string, cond func(*appcontext.Context) bool) *appcontext.Context {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *appcontext.Context
	for time.Now().Before(deadline) {
		c, err := store.Get(context.Background(), id)
		if err == nil {
			last = c
			if cond(c) {
				return c
			}
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s: not after 30s; last: %s", what, describe(last))
	return nil
}

func describe(c *appcontext.Context) string {
	if c == nil {
		return "no context"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "status %+v;", c.Status)
	for _, p := range c.Placements {
		for _, r := range p.Resources {
			st := p.StatusOf(r.Key())
			fmt.Fprintf(&b, " %s=%s(%s)", r.Key(), st.Status, st.Error)
		}
	}
	return b.String()
}

func statusOf(c *appcontext.Context, key string) appcontext.ResourceStatus {
	return c.Placements[0].StatusOf(key)
}

// patches records the server-side apply patches a fake cluster receives
// and answers them as the test says.
type patches struct {
	mu     sync.Mutex
	bodies map[string][]string // "resource/name" → bodies
	answer func(resource, name string, n int, body []byte) error
}

func (p *patches) reactor(action clienttesting.Action) (bool, runtime.Object, error) {
	pa := action.(clienttesting.PatchAction)
	key := pa.GetResource().Resource + "/" + pa.GetName()
	p.mu.Lock()
	if p.bodies == nil {
		p.bodies = map[string][]string{}
	}
	p.bodies[key] = append(p.bodies[key], string(pa.GetPatch()))
	n := len(p.bodies[key])
	answer := p.answer
	p.mu.Unlock()
	if err := answer(pa.GetResource().Resource, pa.GetName(), n, pa.GetPatch()); err != nil {
		return true, nil, err
	}
	obj := &unstructured.Unstructured{}
	_ = obj.UnmarshalJSON(pa.GetPatch())
	return true, obj, nil
}

func (p *patches) of(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies[key]...)
}

// errorClassAnswers answers patches as API servers do for each error
// class: 429 twice, invalid, forbidden, a namespace that does not exist
// until allowNS is closed (and whose creation is forbidden until then),
// and a field the schema lacks.
func errorClassAnswers(allowNS <-chan struct{}) func(resource, name string, n int, body []byte) error {
	gr := schema.GroupResource{Resource: "configmaps"}
	return func(resource, name string, n int, body []byte) error {
		switch {
		case resource == "configmaps" && name == "busy" && n <= 2:
			return apierrors.NewTooManyRequests("slow down", 0)
		case resource == "configmaps" && name == "bad":
			return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "bad", nil)
		case resource == "configmaps" && name == "denied":
			return apierrors.NewForbidden(gr, "denied", errors.New(`User "argus" cannot patch configmaps`))
		case resource == "configmaps" && name == "elsewhere" && n == 1:
			return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "newns")
		case resource == "namespaces":
			select {
			case <-allowNS:
				return nil
			default:
				return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "newns", errors.New("cannot create namespaces"))
			}
		case resource == "configmaps" && name == "elsewhere":
			select {
			case <-allowNS:
				return nil
			default:
				return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "newns")
			}
		case resource == "daemonsets" && strings.Contains(string(body), "replicas"):
			return &apierrors.StatusError{ErrStatus: metav1Status(500, "failed to create typed patch object: .spec.replicas: field not declared in schema")}
		}
		return nil
	}
}

// TestErrorClasses drives one placement through every error class with
// fake clients returning the API errors real API servers return: each
// resource ends in the status its class says, with the server's reason,
// waiting ones apply once what they wait for appears, and the context's
// status says what went wrong while rsync still works on the rest.
func TestErrorClasses(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	fc.disc.openapi = map[string][]byte{"apis/apps/v1": []byte(daemonSetSchema)}
	var nsAllowed, widgetsServed sync.Once
	allowNS := make(chan struct{})
	p := &patches{answer: errorClassAnswers(allowNS)}
	fc.dyn.PrependReactor("patch", "*", p.reactor)
	e, store := newTestEngine(t, fc, "")
	id := createContext(t, store,
		manifest("v1", "ConfigMap", "ok", "default", nil),
		manifest("v1", "ConfigMap", "busy", "default", nil),
		manifest("v1", "ConfigMap", "bad", "default", nil),
		manifest("v1", "ConfigMap", "denied", "default", nil),
		manifest("example.com/v1", "Widget", "w1", "", map[string]any{"spec": map[string]any{"size": 1}}),
		manifest("v1", "ConfigMap", "elsewhere", "newns", nil),
		manifest("apps/v1", "DaemonSet", "ds", "default", map[string]any{"spec": map[string]any{"replicas": 2, "selector": map[string]any{"a": "b"}}}),
	)
	e.Instantiate("g/"+id, id)

	c := waitFor(t, store, id, "first pass recorded", func(c *appcontext.Context) bool {
		return c.Status.Status == appcontext.InstantiateFailed && statusOf(c, "ConfigMap/default/busy").Status == appcontext.RsyncApplied
	})
	checkFirstPass(t, c, p)
	if !e.Busy("g/" + id) {
		t.Error("the action ended while resources wait")
	}

	// Resume while the action runs starts nothing new.
	e.mu.Lock()
	before := e.groups["g/"+id]
	e.mu.Unlock()
	if err := e.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	after := e.groups["g/"+id]
	e.mu.Unlock()
	if before != after {
		t.Error("Resume restarted a running action")
	}

	// What they wait for appears: both apply, with no further action.
	widgetsServed.Do(func() { fc.disc.serve(apiResources("example.com/v1", false, map[string]string{"Widget": "widgets"})) })
	nsAllowed.Do(func() { close(allowNS) })
	c = waitFor(t, store, id, "waiting resources applied", func(c *appcontext.Context) bool {
		return statusOf(c, "Widget/_/w1").Status == appcontext.RsyncApplied && statusOf(c, "ConfigMap/newns/elsewhere").Status == appcontext.RsyncApplied &&
			!c.Status.Active
	})
	if c.Status.Status != appcontext.InstantiateFailed || len(c.Status.Reasons) != 2 {
		t.Errorf("final status: %+v", c.Status)
	}
	// Failed resources were tried once: no hot retry.
	if n := len(p.of("configmaps/bad")); n != 1 {
		t.Errorf("an invalid object was applied %d times", n)
	}
	waitIdle(t, e, "g/"+id)

	// Terminate deletes everything, including kinds the cluster no longer serves.
	e.Terminate("g/"+id, id)
	waitFor(t, store, id, "terminated", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Terminated })
}

// checkFirstPass checks each resource's status after the first pass of
// TestErrorClasses: the class its answer puts it in, with the server's
// reason.
func checkFirstPass(t *testing.T, c *appcontext.Context, p *patches) {
	t.Helper()
	want := map[string]string{
		"ConfigMap/default/ok":      appcontext.RsyncApplied,
		"ConfigMap/default/busy":    appcontext.RsyncApplied, // after two 429s
		"ConfigMap/default/bad":     appcontext.RsyncFailed,
		"ConfigMap/default/denied":  appcontext.RsyncFailed,
		"Widget/_/w1":               appcontext.RsyncWaiting,
		"ConfigMap/newns/elsewhere": appcontext.RsyncWaiting,
		"DaemonSet/default/ds":      appcontext.RsyncApplied,
	}
	for key, st := range want {
		if got := statusOf(c, key); got.Status != st {
			t.Errorf("%s: %s (%s), want %s", key, got.Status, got.Error, st)
		}
	}
	if r := statusOf(c, "Widget/_/w1").Error; !strings.Contains(r, "Widget") || strings.Contains(r, "unreachable") {
		t.Errorf("Widget's reason: %q", r)
	}
	if r := statusOf(c, "ConfigMap/default/denied").Error; !strings.Contains(r, `cannot patch configmaps`) {
		t.Errorf("the API server's message is not the reason: %q", r)
	}
	if r := statusOf(c, "ConfigMap/newns/elsewhere").Error; !strings.Contains(r, `namespace "newns"`) {
		t.Errorf("namespace reason: %q", r)
	}
	ds := statusOf(c, "DaemonSet/default/ds")
	if len(ds.Warnings) != 1 || ds.Warnings[0] != `unknown field "spec.replicas"` {
		t.Errorf("DaemonSet warnings: %q", ds.Warnings)
	}
	if bodies := p.of("daemonsets/ds"); len(bodies) != 2 || strings.Contains(bodies[1], "replicas") || !strings.Contains(bodies[1], `"selector"`) {
		t.Errorf("DaemonSet patches: %q", bodies)
	}
	if !c.Status.Active || !strings.Contains(c.Status.Error, "2 of 7 resources failed, 2 waiting") || len(c.Status.Reasons) != 4 {
		t.Errorf("context status while waiting: %+v", c.Status)
	}
}

func waitIdle(t *testing.T, e *Engine, group string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.Busy(group) {
		if time.Now().After(deadline) {
			t.Fatal("the action did not end")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// An unreachable cluster: every resource is Retrying with "cluster
// unreachable", the context is Instantiating (not failed), and all apply
// once it answers again.
func TestUnreachableIsRetried(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	var mu sync.Mutex
	down := true
	fc.dyn.PrependReactor("patch", "*", (&patches{answer: func(string, string, int, []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}
		}
		return nil
	}}).reactor)
	e, store := newTestEngine(t, fc, "")
	id := createContext(t, store, manifest("v1", "ConfigMap", "a", "default", nil), manifest("v1", "ConfigMap", "b", "default", nil))
	e.Instantiate("g/"+id, id)
	c := waitFor(t, store, id, "retrying", func(c *appcontext.Context) bool {
		return statusOf(c, "ConfigMap/default/b").Status == appcontext.RsyncRetrying && c.Status.Error != ""
	})
	if r := statusOf(c, "ConfigMap/default/a").Error; !strings.HasPrefix(r, "cluster unreachable: ") {
		t.Errorf("reason %q", r)
	}
	if c.Status.Status != appcontext.Instantiating || c.Status.Error != "2 retrying" {
		t.Errorf("context status: %+v", c.Status)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	waitFor(t, store, id, "instantiated", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Instantiated })
}

// Strict field validation refuses unknown fields instead of dropping them;
// a refused kubeconfig fails the resource, never reads "unreachable".
func TestStrictAndRefusedCluster(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	fc.disc.openapi = map[string][]byte{"apis/apps/v1": []byte(daemonSetSchema)}
	fc.dyn.PrependReactor("patch", "*", (&patches{answer: func(resource, _ string, _ int, body []byte) error {
		if resource == "daemonsets" && strings.Contains(string(body), "replicas") {
			return &apierrors.StatusError{ErrStatus: metav1Status(500, "failed to create typed patch object")}
		}
		return nil
	}}).reactor)
	e, store := newTestEngine(t, fc, FieldValidationStrict)
	id := createContext(t, store, manifest("apps/v1", "DaemonSet", "ds", "default", map[string]any{"spec": map[string]any{"replicas": 2}}))
	e.Instantiate("g/"+id, id)
	c := waitFor(t, store, id, "failed", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.InstantiateFailed })
	if r := statusOf(c, "DaemonSet/default/ds").Error; !strings.Contains(r, "spec.replicas") || !strings.Contains(r, "strict") {
		t.Errorf("strict reason: %q", r)
	}

	refused := newFakeCluster(coreKinds()...)
	refused.err = fmt.Errorf("kubeconfig: %w", errInvalidKubeconfig)
	e2, store2 := newTestEngine(t, refused, "")
	id2 := createContext(t, store2, manifest("v1", "ConfigMap", "a", "default", nil))
	e2.Instantiate("g/"+id2, id2)
	c = waitFor(t, store2, id2, "failed", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.InstantiateFailed })
	if st := statusOf(c, "ConfigMap/default/a"); st.Status != appcontext.RsyncFailed || strings.Contains(st.Error, "unreachable") {
		t.Errorf("refused kubeconfig: %+v", st)
	}
}

// A failed context rsync was still working on (Active) is resumed by a new
// process; one a user stopped is not.
func TestResumeActiveFailedContext(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	fc.dyn.PrependReactor("patch", "*", (&patches{answer: func(string, string, int, []byte) error { return nil }}).reactor)
	e, store := newTestEngine(t, fc, "")
	ctx := context.Background()
	active := createContext(t, store, manifest("v1", "ConfigMap", "a", "default", nil))
	stopped := createContext(t, store, manifest("v1", "ConfigMap", "b", "default", nil))
	if err := store.SetStatus(ctx, active, appcontext.Status{Status: appcontext.InstantiateFailed, Error: "1 of 2 resources failed, 1 waiting", Active: true}); err != nil {
		t.Fatal(err)
	}
	if err := store.SetStatus(ctx, stopped, appcontext.Status{Status: appcontext.InstantiateFailed, Error: "stopped by the user"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, store, active, "the active context resumed", func(c *appcontext.Context) bool {
		return c.Status.Status == appcontext.Instantiated
	})
	if e.Busy("g/" + stopped) {
		t.Fatal("a stopped context was resumed")
	}
	if c, _ := store.Get(ctx, stopped); statusOf(c, "ConfigMap/default/b").Status != appcontext.RsyncPending {
		t.Fatalf("a stopped context's resource was applied: %s", describe(c))
	}
}

// cloudClusters gives a logical cloud's user a cluster of its own, the
// cluster's credentials another.
type cloudClusters struct{ admin, user *fakeCluster }

func (c cloudClusters) Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error) {
	return c.admin.Client(ctx, ref)
}

func (c cloudClusters) CloudClient(ctx context.Context, ref appcontext.ClusterRef, _ cluster.Cloud) (*cluster.Client, error) {
	return c.user.Client(ctx, ref)
}

// A logical cloud's user that may not write ResourceBundleStates gets its
// bundle written with the cluster's credentials; where nothing may write
// it, the placement's bundle snapshot says why.
func TestBundleOfARestrictedUser(t *testing.T) {
	kinds := append(coreKinds(), apiResources("k8splugin.io/v1alpha1", true, map[string]string{"ResourceBundleState": "resourcebundlestates"}))
	forbidBundles := func(resource, _ string, _ int, _ []byte) error {
		if resource == "resourcebundlestates" {
			return apierrors.NewForbidden(schema.GroupResource{Group: "k8splugin.io", Resource: resource}, "b", errors.New("user cannot patch"))
		}
		return nil
	}
	admin, user := newFakeCluster(kinds...), newFakeCluster(kinds...)
	adminPatches := &patches{answer: func(string, string, int, []byte) error { return nil }}
	admin.dyn.PrependReactor("patch", "*", adminPatches.reactor)
	user.dyn.PrependReactor("patch", "*", (&patches{answer: forbidBundles}).reactor)
	e, store := newTestEngine(t, cloudClusters{admin: admin, user: user}, "")
	id := appcontext.NewID()
	meta := appcontext.Meta{ID: id, Kind: "dig", Group: "g/" + id, StatusID: id, Namespace: "ns", Project: "p", LogicalCloud: "lc", Created: time.Now().UTC()}
	if err := store.Create(context.Background(), meta, appcontext.Status{Status: appcontext.Instantiating},
		[]*appcontext.Placement{{App: "app", Cluster: c1, Resources: []appcontext.Resource{manifest("v1", "ConfigMap", "a", "ns", nil)}}}); err != nil {
		t.Fatal(err)
	}
	e.Instantiate("g/"+id, id)
	waitFor(t, store, id, "instantiated", func(c *appcontext.Context) bool { return c.Status.Status == appcontext.Instantiated })
	deadline := time.Now().Add(30 * time.Second)
	for len(adminPatches.of("resourcebundlestates/"+BundleName("app", id))) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the bundle was not written with the cluster's credentials")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}

	refusing := newFakeCluster(kinds...)
	refusing.dyn.PrependReactor("patch", "*", (&patches{answer: forbidBundles}).reactor)
	e2, store2 := newTestEngine(t, refusing, "")
	id2 := createContext(t, store2, manifest("v1", "ConfigMap", "b", "default", nil))
	e2.Instantiate("g/"+id2, id2)
	c := waitFor(t, store2, id2, "the refusal recorded", func(c *appcontext.Context) bool { return c.Placements[0].Bundle != nil })
	if r := c.Placements[0].Bundle.Refused; !strings.Contains(r, "could not be applied") || !strings.Contains(r, "forbidden") {
		t.Fatalf("bundle snapshot reason %q", r)
	}
}
