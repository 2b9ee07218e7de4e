package status

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
)

// crashLoop is a frontend app on one cluster whose Deployment has one pod
// crash-looping (testdata/crashloop-bundle.json, as the monitor writes it).
func crashLoop(t *testing.T) Input {
	t.Helper()
	bundle, err := os.ReadFile("testdata/crashloop-bundle.json")
	if err != nil {
		t.Fatal(err)
	}
	edge := appcontext.ClusterRef{Provider: "cp", Name: "edge01"}
	rs := []appcontext.Resource{res("apps", "v1", "Deployment", "frontend"), res("", "v1", "Service", "frontend")}
	statuses := map[string]appcontext.ResourceStatus{}
	for _, r := range rs {
		statuses[r.Key()] = appcontext.ResourceStatus{Status: appcontext.RsyncApplied}
	}
	return Input{
		Header: Header{Project: "p", CompositeApp: "ca", Version: "v1", Name: "dig"},
		State:  []catalog.StateAction{{State: "Instantiated", ContextID: "1", TimeStamp: now}}, StatusID: "1",
		Context: &appcontext.Context{Meta: appcontext.Meta{ID: "1", Namespace: "default"}, Status: appcontext.Status{Status: appcontext.Instantiated},
			Placements: []*appcontext.Placement{{App: "frontend", Cluster: edge, Resources: rs, Statuses: statuses,
				Bundle: &appcontext.BundleSnapshot{ResourceVersion: "3", Status: json.RawMessage(bundle)}}}},
		Clusters: map[appcontext.ClusterRef]appcontext.ClusterState{
			edge: {Connectivity: appcontext.Available, Monitor: appcontext.MonitorRunning, LastSeen: now.Add(-time.Second)}},
		Now: now, SilentAfter: 30 * time.Second,
	}
}

// A Deployment whose pod crash-loops is Failed with the pod's reason, not
// Pending; each pod names its ReplicaSet and Deployment; a filter that
// leaves the pods out does not change the Deployment's answer.
func TestCrashLoopingPodFailsItsDeployment(t *testing.T) {
	for _, q := range []Query{{Type: TypeCluster, Output: OutputAll}, {Type: TypeCluster, Output: OutputAll, Resources: []string{"Deployment/frontend"}}} {
		r := Build(crashLoop(t), q)
		got := map[string]Resource{}
		for _, x := range r.Apps[0].Clusters[0].Resources {
			got[x.GVK.Kind+"/"+x.Name] = x
		}
		d := got["Deployment/frontend"]
		if d.ReadyStatus != "Failed" || d.Reason != "1 of 2 replicas ready; pod frontend-5d9f-b: container frontend: CrashLoopBackOff" || d.ReadyStatusEMCO != EMCONotReady {
			t.Fatalf("resource=%v: Deployment %s (%q)", q.Resources, d.ReadyStatus, d.Reason)
		}
		if r.ReadyStatus["Failed"] == 0 || *r.Ready {
			t.Fatalf("counts %v, ready %v", r.ReadyStatus, *r.Ready)
		}
		if len(q.Resources) > 0 {
			continue
		}
		p := got["Pod/frontend-5d9f-b"]
		if len(p.Owners) != 2 || p.Owners[0].GVK.Kind != "ReplicaSet" || p.Owners[0].Name != "frontend-5d9f" ||
			p.Owners[1].GVK != (GVK{"apps", "v1", "Deployment"}) || p.Owners[1].Name != "frontend" {
			t.Fatalf("pod owners %+v", p.Owners)
		}
		if s := got["Service/frontend"]; s.ReadyStatus != "Ready" || len(s.Owners) != 0 {
			t.Fatalf("service %+v", s)
		}
		if d.Owners != nil {
			t.Fatalf("deployment owners %+v", d.Owners)
		}
	}
}

// The overview keeps the worst of what is not Ready: a Failed pod is never
// cut for a Pending Deployment listed before it.
func TestWorstFirst(t *testing.T) {
	var l []NotReady
	for i, s := range []string{"Pending", "Unknown", "Pending", "Failed", "NotPresent", "Terminating", "Failed"} {
		l = append(l, NotReady{Name: s + string(rune('a'+i)), ReadyStatus: s})
	}
	var got []string
	for _, n := range worstFirst(l, 4) {
		got = append(got, n.Name)
	}
	if strings.Join(got, " ") != "Failedd Failedg NotPresente Pendinga" {
		t.Fatalf("%v", got)
	}
}
