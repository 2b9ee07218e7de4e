package rsync

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/ownership"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	daemonSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
)

// fencedDispatcher is a dispatcher whose groups are claimed through a
// real ownership Set, so its runs are fenced by real claims.
func fencedDispatcher(t *testing.T, store *appcontext.Store, clusters Clusters) (*Dispatcher, *ownership.Kind) {
	t.Helper()
	set, err := ownership.New(ownership.Options{Client: env.Etcd.Client, Prefix: store.Prefix(), ID: "r1", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var d *Dispatcher
	kind := set.Kind("groups", ownership.HandlerFuncs{Acquire: func(g string) { d.Acquired(g) }, Release: func(g string) { d.Released(g) }})
	e, err := New(Options{Store: store, Clusters: clusters, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err = NewDispatcher(DispatcherOptions{Engine: e, Claims: kind, Lease: set.Lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = set.Run(ctx) }()
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); e.Close() })
	<-set.Ready()
	return d, kind
}

// seed puts an object on the fake cluster as an earlier apply left it.
func seed(t *testing.T, fc *fakeCluster, gvr schema.GroupVersionResource, kind, name, statusID string, fence int64) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetName(name)
	u.SetNamespace("default")
	u.SetResourceVersion("7")
	u.SetLabels(map[string]string{v1alpha1.LabelContextID: statusID})
	u.SetAnnotations(map[string]string{v1alpha1.AnnotationFence: strconv.FormatInt(fence, 10)})
	if err := fc.dyn.Tracker().Create(gvr, u, "default"); err != nil {
		t.Fatal(err)
	}
}

// waitFence waits until the group is acquired and returns its fence.
func waitFence(t *testing.T, kind *ownership.Kind, group string) ownership.Fence {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fence, ok := kind.Fence(group); ok {
			return fence
		}
		if time.Now().After(deadline) {
			t.Fatal("the group was not acquired")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// waitStopped waits until the group's run stopped and checks that the
// fenced run recorded nothing of the refused object nor its end, and
// left its record.
func waitStopped(t *testing.T, d *Dispatcher, store *appcontext.Store, group, id, refused string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.opts.Engine.Busy(group) {
		if time.Now().After(deadline) {
			t.Fatal("the fenced run did not stop")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	c, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st := statusOf(c, refused); st.Status == appcontext.RsyncApplied {
		t.Fatalf("the refused object is recorded %s", st.Status)
	}
	if c.Status.Status == appcontext.Instantiated {
		t.Fatal("the fenced run recorded its action done")
	}
	if !d.Busy(group) {
		t.Fatal("the fenced run's record is gone: nobody would finish the action")
	}
}

// A run carries its claim's revision on every object it applies, applies
// over an object only at the resourceVersion it read, and stops — neither
// writing nor recording anything more, and leaving its record to the
// group's next owner — when it meets an object a newer owner of the
// deployment wrote.
func TestFencedApplyRefusesANewerOwnersObject(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	p := &patches{answer: func(string, string, int, []byte) error { return nil }}
	fc.dyn.PrependReactor("patch", "*", p.reactor)
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	d, kind := fencedDispatcher(t, store, fc)

	// The ConfigMap's wave comes before the DaemonSet's.
	id := createContext(t, store, manifest("v1", "ConfigMap", "old", "default", nil), manifest("apps/v1", "DaemonSet", "new", "default", nil))
	group := "g/" + id
	seed(t, fc, configMaps, "ConfigMap", "old", id, 1)
	seed(t, fc, daemonSets, "DaemonSet", "new", id, 1<<40) // a later claim than any this etcd made
	d.Instantiate(group, id)
	fence := waitFence(t, kind, group)
	deadline := time.Now().Add(30 * time.Second)
	for len(p.of("configmaps/old")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the older object was not applied")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	waitStopped(t, d, store, group, id, "DaemonSet/default/new")
	bodies := p.of("configmaps/old")
	if len(bodies) != 1 {
		t.Fatalf("the older object was applied %d times", len(bodies))
	}
	var applied struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(bodies[0]), &applied); err != nil {
		t.Fatal(err)
	}
	if applied.Metadata.ResourceVersion != "7" || applied.Metadata.Annotations[v1alpha1.AnnotationFence] != strconv.FormatInt(fence.Token(), 10) {
		t.Fatalf("apply of the older object: resourceVersion %q, fence %q; want 7 and %d", applied.Metadata.ResourceVersion,
			applied.Metadata.Annotations[v1alpha1.AnnotationFence], fence.Token())
	}
	if got := p.of("daemonsets/new"); len(got) != 0 {
		t.Fatalf("the newer owner's object was written over: %v", got)
	}
}

// A write that comes late — the object changed between the read and the
// apply, as when the replica was paused there while the group's next
// owner applied it — meets a Conflict, reads the object again, finds the
// newer owner's token and stops without writing.
func TestFencedApplyStopsAfterALateConflict(t *testing.T) {
	fc := newFakeCluster(coreKinds()...)
	store := appcontext.New(appcontext.Options{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	id := createContext(t, store, manifest("v1", "ConfigMap", "mid", "default", nil))
	seed(t, fc, configMaps, "ConfigMap", "mid", id, 1)
	p := &patches{answer: func(_, name string, n int, _ []byte) error {
		if n > 1 {
			return nil
		}
		// Meanwhile, the next owner applied it.
		cur, err := fc.dyn.Tracker().Get(configMaps, "default", name)
		if err != nil {
			return err
		}
		u := cur.(*unstructured.Unstructured).DeepCopy()
		u.SetAnnotations(map[string]string{v1alpha1.AnnotationFence: strconv.FormatInt(1<<40, 10)})
		u.SetResourceVersion("8")
		if err := fc.dyn.Tracker().Update(configMaps, u, "default"); err != nil {
			return err
		}
		return apierrors.NewConflict(configMaps.GroupResource(), name, errors.New("the object has been modified"))
	}}
	fc.dyn.PrependReactor("patch", "*", p.reactor)
	d, kind := fencedDispatcher(t, store, fc)
	group := "g/" + id
	d.Instantiate(group, id)
	waitFence(t, kind, group)
	deadline := time.Now().Add(30 * time.Second)
	for len(p.of("configmaps/mid")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the object was not applied")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	waitStopped(t, d, store, group, id, "ConfigMap/default/mid")
	if got := p.of("configmaps/mid"); len(got) != 1 {
		t.Fatalf("%d applies of the object; want the one that met the conflict", len(got))
	}
}
