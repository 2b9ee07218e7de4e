package status

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

func TestEMCOFields(t *testing.T) {
	for _, typ := range []string{TypeRsync, TypeCluster} {
		r := Build(fixture(), Query{Type: typ, Output: OutputAll})
		if r.DeployedStatus != appcontext.Instantiated || r.DeployedCounts[appcontext.RsyncApplied] != 4 || r.States.StatusContextID == "" {
			t.Errorf("%s: %+v", typ, r)
		}
		c := r.Apps[1].Clusters[0]
		if c.ClusterProviderEMCO != "cp" || c.ReadyStatus != appcontext.Available || c.Resources[0].DeployedStatus != appcontext.RsyncApplied {
			t.Errorf("%s: cluster %+v", typ, c)
		}
		switch typ {
		case TypeCluster:
			if r.ReadyStatusEMCO != EMCONotReady || r.ReadyCounts[NotPresent] != 1 || c.Resources[0].ReadyStatusEMCO != EMCONotReady {
				t.Errorf("cluster answer readiness: %s %v %+v", r.ReadyStatusEMCO, r.ReadyCounts, c.Resources[0])
			}
		case TypeRsync: // EMCO's status=deployed: no readiness
			if r.ReadyStatusEMCO != "" || len(r.ReadyCounts) > 0 || c.Resources[0].ReadyStatus != "" || c.Ready != nil {
				t.Errorf("rsync answer carries readiness: %+v", c)
			}
		}
	}
}

// EMCO's camelCase counts answer beside the seed ones, and an app filter
// naming no app of the deployment is refused.
func TestEMCOCamelCaseAndUnknownApp(t *testing.T) {
	in := fixture()
	r := Build(in, Query{Type: TypeRsync, Output: OutputAll})
	if r.RsyncStatusEMCO[appcontext.RsyncApplied] != r.RsyncStatus[appcontext.RsyncApplied] || r.Apps[0].Clusters[0].Resources[0].RsyncStatusEMCO == "" {
		t.Errorf("rsyncStatus: %v %+v", r.RsyncStatusEMCO, r.Apps[0].Clusters[0].Resources[0])
	}
	r = Build(in, Query{Type: TypeCluster, Output: OutputAll})
	if len(r.ClusterStatusEMCO) == 0 || r.ClusterStatusEMCO[Present] != r.ClusterStatus[Present] || r.Apps[0].Clusters[0].Resources[0].ClusterStatusEMCO == "" {
		t.Errorf("clusterStatus: %v %+v", r.ClusterStatusEMCO, r.Apps[0].Clusters[0].Resources[0])
	}
	if err := knownApps(in, []string{in.Context.Placements[0].App}); err != nil {
		t.Errorf("a known app: %v", err)
	}
	if err := knownApps(in, []string{"nosuch"}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("an unknown app: %v", err)
	}
}

func TestReadyWhenAllReady(t *testing.T) {
	in := fixture()
	in.Context.Placements = in.Context.Placements[1:2] // sink on edge01
	q := Query{Type: TypeCluster, Output: OutputAll, Resources: []string{"Service/fw0-sink"}}
	if r := Build(in, q); r.ReadyStatusEMCO != EMCOReady || r.ReadyCounts[EMCOReady] != 1 {
		t.Fatalf("a Ready service: %s %v", r.ReadyStatusEMCO, r.ReadyCounts)
	}
}

func TestStatesRevisions(t *testing.T) {
	ts := time.Unix(0, 0).UTC()
	st := states("1", []catalog.StateAction{{State: "Approved", TimeStamp: ts}, {State: "Instantiated", ContextID: "1"},
		{State: "Updated", ContextID: "1"}, {State: "Updated", ContextID: "1"}, {State: "Terminated", ContextID: "1"}})
	var revs []int64
	for _, a := range st.Actions {
		revs = append(revs, a.Revision)
	}
	if b, _ := json.Marshal(revs); string(b) != "[0,1,2,3,3]" {
		t.Fatalf("revisions %s", b)
	}
}

func TestLists(t *testing.T) {
	in := fixture()
	parse := func(s string) Query {
		q, err := ParseQuery(mustQuery(s))
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	apps := Lists(in, parse("apps")).(AppsList)
	if b, _ := json.Marshal(apps.Apps); string(b) != `["db","sink"]` || apps.CompositeApp != "ca" {
		t.Fatalf("apps: %+v", apps)
	}
	cl := Lists(in, parse("clusters&app=sink")).(ClustersByApp)
	if len(cl.ClustersByApp) != 1 || len(cl.ClustersByApp[0].Clusters) != 2 || cl.ClustersByApp[0].Clusters[1].Cluster != "edge02" {
		t.Fatalf("clusters: %+v", cl)
	}
	res := Lists(in, parse("resources&app=sink&cluster=cp%2Bedge01")).(ResourcesByApp)
	if len(res.ResourcesByApp) != 1 || len(res.ResourcesByApp[0].Resources) != 3 {
		t.Fatalf("resources (deployed): %+v", res)
	}
	res = Lists(in, parse("resources&app=sink&cluster=cp%2Bedge01&status=ready")).(ResourcesByApp)
	if len(res.ResourcesByApp[0].Resources) != 5 || res.ResourcesByApp[0].Resources[4].GVK.Kind != "Pod" {
		t.Fatalf("resources (ready) list no pods: %+v", res)
	}
	if q := parse("apps&clusters"); !q.ListApps || !q.ListClusters {
		t.Fatal("flags not parsed")
	}
	var empty Input
	if b, _ := json.Marshal(Lists(empty, parse("clusters"))); string(b) != `{"clustersByApp":[]}` {
		t.Fatalf("no context: %s", b)
	}
}

func mustQuery(s string) url.Values {
	v, err := url.ParseQuery(s)
	if err != nil {
		panic(err)
	}
	return v
}

// /v1/query never returns a Secret's data, nor the last-applied
// annotation that copies it (issue 23); other kinds keep theirs.
func TestQueryObjectHidesSecretData(t *testing.T) {
	secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "annotations": map[string]any{lastApplied: `{"data":{"k":"c2VjcmV0"}}`, "keep": "me"},
			"managedFields": []any{map[string]any{"manager": "kubectl"}}},
		"data": map[string]any{"k": "c2VjcmV0"}, "stringData": map[string]any{"k": "secret"}}}
	got := string(queryObject(secret))
	if strings.Contains(got, "c2VjcmV0") || strings.Contains(got, `"secret"`) || strings.Contains(got, "managedFields") || !strings.Contains(got, `"keep":"me"`) {
		t.Fatalf("Secret as queried: %s", got)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "annotations": map[string]any{lastApplied: `{}`}}}}
	if got := string(queryObject(cm)); !strings.Contains(got, lastApplied) {
		t.Fatalf("ConfigMap as queried: %s", got)
	}
}
