package status

import (
	"encoding/json"
	"errors"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var now = time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)

func res(group, version, kind, name string) appcontext.Resource {
	gv := version
	if group != "" {
		gv = group + "/" + version
	}
	return appcontext.Resource{GVK: schema.GroupVersionKind{Group: group, Version: version, Kind: kind}, Name: name, Namespace: "default",
		Manifest: json.RawMessage(`{"apiVersion":"` + gv + `","kind":"` + kind + `","metadata":{"name":"` + name + `"}}`)}
}

// fixture: app "sink" on a healthy edge01 (one pod not ready, a ConfigMap
// missing from the cluster) and on an unreachable edge02; app "db" on
// edge01 with no bundle received yet.
func fixture() Input {
	edge1 := appcontext.ClusterRef{Provider: "cp", Name: "edge01"}
	edge2 := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	sinkRes := []appcontext.Resource{res("apps", "v1", "Deployment", "fw0-sink"), res("", "v1", "Service", "fw0-sink"), res("", "v1", "ConfigMap", "fw0-sink-config")}
	applied := func(rs []appcontext.Resource) map[string]appcontext.ResourceStatus {
		m := map[string]appcontext.ResourceStatus{}
		for _, r := range rs {
			m[r.Key()] = appcontext.ResourceStatus{Status: appcontext.RsyncApplied, Fields: "h-" + r.Name}
		}
		return m
	}
	// The Deployment is as applied, the Service drifted (healed once
	// before), the ConfigMap is gone.
	sinkStatuses := applied(sinkRes)
	svc := sinkStatuses[sinkRes[1].Key()]
	svc.Heal = &appcontext.Heal{Count: 1, Streak: 1, Last: now.Add(-time.Minute), By: appcontext.HealBySelfHeal, Was: "OutOfSync"}
	sinkStatuses[sinkRes[1].Key()] = svc
	bundle := `{"ready":false,"resourceCount":4,"reason":"pod fw0-sink-1: containers not ready: sink","trimmed":false,"observedGeneration":1,"fieldsHashed":true,"unwatchedKinds":[],
	 "deploymentStatuses":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"fw0-sink","namespace":"default"},"spec":{"replicas":2},"status":{"readyReplicas":1},"readyStatus":"Pending","reason":"1 of 2 replicas ready","managedFieldsHash":"h-fw0-sink"}],
	 "serviceStatuses":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"fw0-sink","namespace":"default"},"readyStatus":"Ready","managedFieldsHash":"changed"}],
	 "podStatuses":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"fw0-sink-0","namespace":"default"},"status":{"phase":"Running"},"readyStatus":"Ready"},
	                {"apiVersion":"v1","kind":"Pod","metadata":{"name":"fw0-sink-1","namespace":"default"},"status":{"phase":"Running"},"readyStatus":"Pending","reason":"containers not ready: sink"}]}`
	dbRes := []appcontext.Resource{res("apps", "v1", "StatefulSet", "db")}
	return Input{
		Header: Header{Project: "p", CompositeApp: "ca", Version: "v1", CompositeProfile: "cpf", Name: "dig"},
		State:  []catalog.StateAction{{State: "Instantiated", ContextID: "2755581958183303505", TimeStamp: now.Add(-time.Hour)}}, StatusID: "2755581958183303505",
		Context: &appcontext.Context{
			Meta:   appcontext.Meta{ID: "2755581958183303505", Namespace: "default"},
			Status: appcontext.Status{Status: appcontext.Instantiated},
			Placements: []*appcontext.Placement{
				{App: "db", Cluster: edge1, Resources: dbRes, Statuses: applied(dbRes)},
				{App: "sink", Cluster: edge1, Resources: sinkRes, Statuses: sinkStatuses,
					Bundle: &appcontext.BundleSnapshot{ResourceVersion: "7", Status: json.RawMessage(bundle)}},
				{App: "sink", Cluster: edge2, Resources: sinkRes, Statuses: map[string]appcontext.ResourceStatus{
					sinkRes[0].Key(): {Status: appcontext.RsyncRetrying}}},
			},
		},
		Clusters: map[appcontext.ClusterRef]appcontext.ClusterState{
			edge1: {Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning, LastSeen: now.Add(-5 * time.Second)},
			edge2: {Connectivity: appcontext.Unreachable, UnreachableSince: now.Add(-time.Minute), Monitor: appcontext.MonitorRunning, LastSeen: now.Add(-2 * time.Minute)},
		},
		Now: now, SilentAfter: 30 * time.Second,
	}
}

func TestGolden(t *testing.T) {
	for _, typ := range []string{TypeRsync, TypeCluster} {
		for _, out := range []string{OutputSummary, OutputAll, OutputDetail} {
			name := typ + "-" + out
			t.Run(name, func(t *testing.T) {
				got, err := json.MarshalIndent(Build(fixture(), Query{Type: typ, Output: out}), "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", name+".json")
				if *update {
					if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(string(want)) != string(got) {
					t.Fatalf("%s differs (go test -update rewrites it):\n%s", path, got)
				}
			})
		}
	}
}

func TestSemantics(t *testing.T) {
	r := Build(fixture(), Query{Type: TypeCluster, Output: OutputAll})
	if *r.Ready {
		t.Fatal("ready with a pending deployment")
	}
	// Counts: sink/edge01 has 3 applied resources + 2 pods; edge02's 3 are
	// Unknown (unreachable); db's 1 is Unknown (no bundle yet).
	wantReady := map[string]int{"Pending": 2, "Ready": 2, "NotPresent": 1, "Unknown": 4}
	wantPresence := map[string]int{"Present": 4, "NotPresent": 1, "Unknown": 4}
	for k, v := range wantReady {
		if r.ReadyStatus[k] != v {
			t.Errorf("ready-status = %v, want %v", r.ReadyStatus, wantReady)
		}
	}
	for k, v := range wantPresence {
		if r.ClusterStatus[k] != v {
			t.Errorf("cluster-status = %v, want %v", r.ClusterStatus, wantPresence)
		}
	}
	reasons := map[string]string{}
	for _, a := range r.Apps {
		for _, c := range a.Clusters {
			for _, res := range c.Resources {
				reasons[a.Name+"/"+c.Cluster+"/"+res.GVK.Kind+"/"+res.Name] = res.Reason
			}
		}
	}
	for key, want := range map[string]string{
		"sink/edge02/Deployment/fw0-sink":       "cluster unreachable since 2026-01-01T09:59:30Z",
		"db/edge01/StatefulSet/db":              "no ResourceBundleState received yet",
		"sink/edge01/ConfigMap/fw0-sink-config": "not found in the cluster",
		"sink/edge01/Pod/fw0-sink-1":            "containers not ready: sink",
	} {
		if reasons[key] != want {
			t.Errorf("%s: reason %q, want %q", key, reasons[key], want)
		}
	}

	// A monitor whose Lease stopped moving is Silent even if the stored
	// state still says Running.
	in := fixture()
	in.Now = now.Add(time.Minute)
	r = Build(in, Query{Type: TypeCluster, Output: OutputAll, Apps: []string{"sink"}, Clusters: []appcontext.ClusterRef{{Provider: "cp", Name: "edge01"}}})
	c := r.Apps[0].Clusters[0]
	if c.Monitor != "Silent" || !strings.HasPrefix(c.Resources[0].Reason, "monitor silent since") || c.Resources[0].ReadyStatus != "Unknown" {
		t.Fatalf("silent monitor: %+v", c)
	}

	// Filters: resource by name and Kind/name, ORed; counts follow.
	r = Build(fixture(), Query{Type: TypeRsync, Output: OutputAll, Resources: []string{"db", "Service/fw0-sink"}})
	if r.RsyncStatus["Applied"] != 2 || r.RsyncStatus["Pending"] != 1 || len(r.Apps) != 2 {
		t.Fatalf("resource filter: %v, %d apps", r.RsyncStatus, len(r.Apps))
	}
	r = Build(fixture(), Query{Type: TypeRsync, Output: OutputAll, Apps: []string{"nope"}})
	if len(r.RsyncStatus) != 0 || len(r.Apps) != 0 {
		t.Fatalf("filter matching nothing: %+v", r)
	}

	// A terminated context reports Unknown for the cluster side.
	in = fixture()
	in.Context.Status.Status = appcontext.Terminated
	r = Build(in, Query{Type: TypeCluster, Output: OutputSummary})
	if r.ClusterStatus["Unknown"] != 7 || *r.Ready || r.Apps != nil {
		t.Fatalf("terminated: %+v", r)
	}
}

func TestParseQuery(t *testing.T) {
	q, err := ParseQuery(url.Values{"type": {"cluster"}, "output": {"summary"}, "cluster": {"cp+edge01", "cp edge02"},
		"app": {"a", "b"}, "resource": {"Deployment/x"}})
	if err != nil {
		t.Fatal(err)
	}
	if q.Type != TypeCluster || q.Output != OutputSummary || len(q.Clusters) != 2 || q.Clusters[1].Name != "edge02" || len(q.Apps) != 2 {
		t.Fatalf("query = %+v", q)
	}
	if q, _ := ParseQuery(url.Values{"status": {"ready"}}); q.Type != TypeCluster {
		t.Fatal("status=ready means type=cluster")
	}
	if q, _ := ParseQuery(url.Values{"instance": {""}}); !q.ListInstances {
		t.Fatal("bare instance lists instances")
	}
	for vals, want := range map[string]string{
		"type=nope":                       "rsync, cluster",
		"output=full":                     "summary, all, detail",
		"cluster=edge01":                  "<provider>+<cluster>",
		"status=maybe":                    "deployed, ready",
		"instance=../x":                   "not a context id",
		"app=" + strings.Repeat("a", 513): "longer than 512",
		strings.Repeat("app=a&", MaxFilterValues) + "app=b": "at most 256",
	} {
		v, _ := url.ParseQuery(vals)
		if _, err := ParseQuery(v); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalid naming %q", vals, err, want)
		}
	}
}

// Resources rsync could not apply say why, in both views; the context's
// status carries the summary and first reasons; Waiting is counted.
func TestRsyncReasons(t *testing.T) {
	in := fixture()
	p := in.Context.Placements[1] // sink on edge01, its bundle lists no ConfigMap
	cm, dep := p.Resources[2].Key(), p.Resources[0].Key()
	p.Statuses = map[string]appcontext.ResourceStatus{
		p.Resources[0].Key(): {Status: appcontext.RsyncApplied, Warnings: []string{`unknown field "spec.replicas"`}},
		p.Resources[1].Key(): {Status: appcontext.RsyncApplied},
		cm:                   {Status: appcontext.RsyncWaiting, Error: "kind v1 ConfigMap is not served"},
	}
	in.Context.Status = appcontext.Status{Status: appcontext.Instantiating, Error: "1 waiting",
		Reasons: []string{"sink on cp+edge01: " + cm + ": Waiting: kind v1 ConfigMap is not served"}}
	r := Build(in, Query{Type: TypeRsync, Output: OutputAll, Apps: []string{"sink"}, Clusters: []appcontext.ClusterRef{p.Cluster}})
	if r.StatusMessage != "1 waiting" || len(r.StatusReasons) != 1 || r.RsyncStatus[appcontext.RsyncWaiting] != 1 {
		t.Fatalf("response: %+v", r)
	}
	byName := map[string]Resource{}
	for _, x := range r.Apps[0].Clusters[0].Resources {
		byName[x.GVK.Kind] = x
	}
	if x := byName["ConfigMap"]; x.RsyncStatus != appcontext.RsyncWaiting || x.Reason != "kind v1 ConfigMap is not served" {
		t.Errorf("rsync view of the waiting ConfigMap: %+v", x)
	}
	if x := byName["Deployment"]; len(x.Warnings) != 1 || x.Reason != "" {
		t.Errorf("rsync view of the Deployment: %+v (%s)", x, dep)
	}
	r = Build(in, Query{Type: TypeCluster, Output: OutputAll, Apps: []string{"sink"}, Clusters: []appcontext.ClusterRef{p.Cluster}})
	for _, x := range r.Apps[0].Clusters[0].Resources {
		if x.GVK.Kind == "ConfigMap" && (x.ReadyStatus != "NotPresent" || !strings.Contains(x.Reason, "not applied (rsync: Waiting): kind v1 ConfigMap")) {
			t.Errorf("cluster view of the waiting ConfigMap: %+v", x)
		}
	}
}

// A cluster-scoped object is found whatever namespace its manifest named
// (charts often set one on every object, and a custom kind's scope is the
// cluster's to know); a resource rsync failed to apply is Failed with the
// apply error, not "not found".
func TestClusterScopedAndApplyFailures(t *testing.T) {
	edge := appcontext.ClusterRef{Provider: "cp", Name: "edge01"}
	pv := res("", "v1", "PersistentVolume", "data")             // manifest namespace "default"
	widget := res("example.com", "v1", "ClusterWidget", "w1")   // custom cluster-scoped kind
	missing := res("widgets.example.com", "v1", "Widget", "w2") // kind not served
	updated := res("apps", "v1", "Deployment", "web")           // present, but its update failed
	rs := []appcontext.Resource{pv, widget, missing, updated}
	bundle := `{"ready":true,"resourceCount":3,"reason":"","observedGeneration":1,"unwatchedKinds":[{"group":"widgets.example.com","version":"v1","kind":"Widget","reason":"kind is not served by the API server"}],
	 "deploymentStatuses":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},"readyStatus":"Ready"}],
	 "resourceStatuses":[{"group":"","version":"v1","kind":"PersistentVolume","name":"data","object":{"status":{"phase":"Available"}},"readyStatus":"Ready"},
	                     {"group":"example.com","version":"v1","kind":"ClusterWidget","name":"w1","object":{},"readyStatus":"Ready","reason":"no readiness rule"}]}`
	in := Input{
		Header: Header{Name: "i1"},
		Context: &appcontext.Context{
			Meta:   appcontext.Meta{ID: "1", Namespace: "default"},
			Status: appcontext.Status{Status: appcontext.InstantiateFailed},
			Placements: []*appcontext.Placement{{App: "a", Cluster: edge, Resources: rs,
				Statuses: map[string]appcontext.ResourceStatus{
					pv.Key():      {Status: appcontext.RsyncApplied},
					widget.Key():  {Status: appcontext.RsyncApplied},
					missing.Key(): {Status: appcontext.RsyncFailed, Error: "kind widgets.example.com/v1, Kind=Widget is not served by the cluster"},
					updated.Key(): {Status: appcontext.RsyncFailed, Error: "Deployment.apps \"web\" is invalid"},
				},
				Bundle: &appcontext.BundleSnapshot{ResourceVersion: "3", Status: json.RawMessage(bundle)}}},
		},
		Clusters: map[appcontext.ClusterRef]appcontext.ClusterState{
			edge: {Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning, LastSeen: now},
		},
		Now: now, SilentAfter: 30 * time.Second,
	}
	got := map[string]Resource{}
	for _, r := range Build(in, Query{Type: TypeCluster}).Apps[0].Clusters[0].Resources {
		got[r.Name] = r
	}
	want := map[string][3]string{ // cluster-status, ready-status, reason fragment
		"data": {Present, "Ready", ""},
		"w1":   {Present, "Ready", "no readiness rule"},
		"w2":   {NotPresent, "Failed", "apply failed: kind widgets.example.com/v1, Kind=Widget is not served"},
		"web":  {Present, "Failed", "apply failed: Deployment.apps \"web\" is invalid"},
	}
	for name, w := range want {
		r := got[name]
		if r.ClusterStatus != w[0] || r.ReadyStatus != w[1] || !strings.Contains(r.Reason, w[2]) {
			t.Errorf("%s: %s/%s %q, want %s/%s containing %q", name, r.ClusterStatus, r.ReadyStatus, r.Reason, w[0], w[1], w[2])
		}
	}
	if got["data"].Namespace != "" {
		t.Errorf("the PersistentVolume is shown in namespace %q; it has none", got["data"].Namespace)
	}
}

// FuzzParseQuery: whatever the query string, parsing never panics, fails
// only with ErrInvalid, and what it accepts is inside the vocabulary and
// the bounds.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"type=cluster&output=detail&app=a&cluster=cp%2Bc1&resource=Deployment/x", "instance", "instance=123",
		"status=ready&cluster=cp+c1", "cluster=%zz", "app=&app=%00", "type=rsync&type=cluster"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return // net/http hands the handler what parsed
		}
		q, err := ParseQuery(v)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: error of another kind: %v", raw, err)
			}
			return
		}
		if (q.Type != TypeRsync && q.Type != TypeCluster) || (q.Output != OutputSummary && q.Output != OutputAll && q.Output != OutputDetail) ||
			len(q.Apps) > MaxFilterValues || len(q.Clusters) > MaxFilterValues || len(q.Resources) > MaxFilterValues {
			t.Fatalf("%q: accepted %+v", raw, q)
		}
		if q.Instance != "" && strings.Trim(q.Instance, "0123456789") != "" {
			t.Fatalf("%q: instance %q", raw, q.Instance)
		}
	})
}

func TestSyncStatesCountsAndFilter(t *testing.T) {
	r := Build(fixture(), Query{Type: TypeRsync, Output: OutputAll})
	if b, _ := json.Marshal(r.SyncCounts); string(b) != `{"Missing":1,"OutOfSync":4,"Synced":1,"Unknown":1}` {
		t.Fatalf("syncCounts %s", b)
	}
	q, err := ParseQuery(mustQuery("sync=Missing&sync=Synced&output=all&type=cluster"))
	if err != nil {
		t.Fatal(err)
	}
	r = Build(fixture(), q)
	var got []string
	for _, a := range r.Apps {
		for _, c := range a.Clusters {
			for _, res := range c.Resources {
				got = append(got, c.Cluster+"/"+res.GVK.Kind+"/"+res.SyncStatus)
			}
		}
	}
	if strings.Join(got, ",") != "edge01/Deployment/Synced,edge01/ConfigMap/Missing" {
		t.Fatalf("filtered: %v", got)
	}
	if b, _ := json.Marshal(r.SyncCounts); string(b) != `{"Missing":1,"Synced":1}` || r.ClusterStatus["Present"] != 1 {
		t.Fatalf("counts follow the filter: sync %s cluster %v", b, r.ClusterStatus)
	}
	if _, err := ParseQuery(mustQuery("sync=Drifting")); err == nil || !strings.Contains(err.Error(), "Synced, OutOfSync, Missing, Unknown") {
		t.Fatalf("an unknown sync state: %v", err)
	}
	// A resource undone again and again says so.
	in := fixture()
	p := in.Context.Placements[1]
	key := p.Resources[1].Key()
	st := p.Statuses[key]
	st.Heal = &appcontext.Heal{Count: 5, Streak: FlappingStreak, Last: now, By: appcontext.HealBySelfHeal, Was: "OutOfSync"}
	p.Statuses[key] = st
	svc := Build(in, Query{Type: TypeRsync, Output: OutputAll}).Apps[1].Clusters[0].Resources[1]
	if svc.SyncStatus != "OutOfSync" || !strings.Contains(svc.SyncReason, "keeps undoing it") || svc.Heal.Count != 5 {
		t.Fatalf("a flapping resource: %+v", svc)
	}
}

func TestDriftListsWhatASyncReapplies(t *testing.T) {
	in := fixture()
	var got []string
	for _, d := range Drift(in, Query{}) {
		got = append(got, d.App+"/"+d.Cluster.Name+"/"+d.Key+"="+d.Was)
	}
	// edge02 is unreachable (its resources are not even applied), db has
	// no bundle yet: neither can have drifted as far as anyone knows.
	if strings.Join(got, ",") != "sink/edge01/Service/default/fw0-sink=OutOfSync,sink/edge01/ConfigMap/default/fw0-sink-config=Missing" {
		t.Fatalf("drift: %v", got)
	}
	if d := Drift(in, Query{Resources: []string{"ConfigMap/fw0-sink-config"}}); len(d) != 1 || d[0].Namespace != "default" || d[0].Reason == "" {
		t.Fatalf("narrowed: %+v", d)
	}
	// Applied by an Argus that recorded no fields: a sync may record them.
	p := in.Context.Placements[1]
	st := p.Statuses[p.Resources[0].Key()]
	st.Fields = ""
	p.Statuses[p.Resources[0].Key()] = st
	if d := Drift(in, Query{Resources: []string{"Deployment/fw0-sink"}}); len(d) != 1 || d[0].Was != "Unknown" {
		t.Fatalf("unrecorded: %+v", d)
	}
}

func TestHooksHaveNoSyncState(t *testing.T) {
	in := fixture()
	p := in.Context.Placements[1]
	p.Resources[2].Hook = &appcontext.Hook{} // the ConfigMap, Missing otherwise
	r := Build(in, Query{Type: TypeRsync, Output: OutputAll})
	if cm := r.Apps[1].Clusters[0].Resources[2]; cm.SyncStatus != "" || r.SyncCounts["Missing"] != 0 {
		t.Fatalf("a hook's sync state: %+v, counts %v", cm, r.SyncCounts)
	}
	for _, d := range Drift(in, Query{}) {
		if d.Name == "fw0-sink-config" {
			t.Fatal("a hook listed as drifted")
		}
	}
}
