package rsync

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/restmapper"
	clienttesting "k8s.io/client-go/testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
)

// fakeCluster is a cluster made of client-go fakes: a dynamic client whose
// reactors the test sets, and a discovery whose served kinds it changes.
type fakeCluster struct {
	dyn  *dynamicfake.FakeDynamicClient
	disc *fakeDiscovery
	c    *cluster.Client
	err  error // what Client returns instead, when set
}

func newFakeCluster(resources ...*metav1.APIResourceList) *fakeCluster {
	disc := &fakeDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}, resources: resources}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	return &fakeCluster{dyn: dyn, disc: disc, c: &cluster.Client{Dynamic: dyn, Discovery: disc,
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}}
}

func (f *fakeCluster) Client(context.Context, appcontext.ClusterRef) (*cluster.Client, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.c, nil
}

func (f *fakeCluster) CloudClient(ctx context.Context, ref appcontext.ClusterRef, _ cluster.Cloud) (*cluster.Client, error) {
	return f.Client(ctx, ref)
}

// fakeDiscovery serves a list of resources the test may change while the
// engine reads it, and an OpenAPI v3 document per group-version.
type fakeDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu        sync.Mutex
	resources []*metav1.APIResourceList
	openapi   map[string][]byte // "apis/apps/v1" → document
}

var _ discovery.DiscoveryInterface = (*fakeDiscovery)(nil)

func (d *fakeDiscovery) serve(l *metav1.APIResourceList) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resources = append(d.resources, l)
}

func (d *fakeDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	groups := map[string]*metav1.APIGroup{}
	var order []string
	for _, l := range d.resources {
		gv, _ := schemaGV(l.GroupVersion)
		g := groups[gv.Group]
		if g == nil {
			g = &metav1.APIGroup{Name: gv.Group}
			groups[gv.Group] = g
			order = append(order, gv.Group)
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: l.GroupVersion, Version: gv.Version}
		g.Versions = append(g.Versions, v)
		g.PreferredVersion = v
	}
	out := &metav1.APIGroupList{}
	for _, name := range order {
		out.Groups = append(out.Groups, *groups[name])
	}
	return out, nil
}

func (d *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.resources {
		if l.GroupVersion == gv {
			return l, nil
		}
	}
	return &metav1.APIResourceList{GroupVersion: gv}, nil
}

func (d *fakeDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return discovery.ServerGroupsAndResources(d)
}

func (d *fakeDiscovery) OpenAPIV3() openapi.Client { return fakeOpenAPI{d} }

type fakeOpenAPI struct{ d *fakeDiscovery }

func (f fakeOpenAPI) Paths() (map[string]openapi.GroupVersion, error) {
	out := map[string]openapi.GroupVersion{}
	for path, doc := range f.d.openapi {
		out[path] = fakeGV(doc)
	}
	return out, nil
}

type fakeGV []byte

func (g fakeGV) Schema(string) ([]byte, error) { return g, nil }
func (g fakeGV) ServerRelativeURL() string     { return "" }

func schemaGV(s string) (metav1.GroupVersion, error) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return metav1.GroupVersion{Group: s[:i], Version: s[i+1:]}, nil
		}
	}
	return metav1.GroupVersion{Version: s}, nil
}

// apiResources lists one group-version's kinds: kind → plural.
func apiResources(gv string, namespaced bool, kinds map[string]string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for kind, plural := range kinds {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: plural, Kind: kind, Namespaced: namespaced,
			Verbs: metav1.Verbs{"get", "list", "watch", "create", "update", "patch", "delete"}})
	}
	return l
}

// daemonSetSchema is a small OpenAPI v3 document for apps/v1 DaemonSet.
const daemonSetSchema = `{"openapi": "3.0.0", "info": {"title": "apps", "version": "v1"}, "paths": {},
 "components": {"schemas": {
  "io.k8s.api.apps.v1.DaemonSet": {"type": "object",
    "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "DaemonSet"}],
    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
      "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
      "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DaemonSetSpec"}]}}},
  "io.k8s.api.apps.v1.DaemonSetSpec": {"type": "object", "properties": {
      "minReadySeconds": {"type": "integer", "format": "int32"},
      "selector": {"type": "object", "additionalProperties": {"type": "string"}},
      "template": {"type": "object", "properties": {
        "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}}},
      "containers": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}]}}}},
  "io.k8s.api.core.v1.Container": {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"}}},
  "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
      "name": {"type": "string"}, "namespace": {"type": "string"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}},
      "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}`
