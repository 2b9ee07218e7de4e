package watcher

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

const goodBundle = `{"ready":false,"resourceCount":2,"reason":"pod web-0: CrashLoopBackOff","trimmed":false,
 "podStatuses":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default"},"status":{"phase":"Running"},
   "readyStatus":"Failed","reason":"CrashLoopBackOff"}],
 "resourceStatuses":[{"group":"example.com","version":"v1","kind":"Widget","name":"w","namespace":"default","object":{},"readyStatus":"Ready"}],
 "unwatchedKinds":[{"group":"x.io","version":"v1","kind":"Gadget","reason":"forbidden"}]}`

func TestCheckBundle(t *testing.T) {
	if err := checkBundle([]byte(goodBundle)); err != nil {
		t.Fatal(err)
	}
	if err := checkBundle([]byte("null")); err != nil {
		t.Fatalf("a bundle without status yet: %v", err)
	}
	long := strings.Repeat("x", 300)
	for name, c := range map[string]struct{ status, want string }{
		"too large":     {`{"reason":"` + strings.Repeat("x", MaxBundleBytes) + `"}`, "bytes, more than"},
		"too deep":      {`{"podStatuses":[{"status":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat("}", 200) + `}]}`, "deeper than 128"},
		"not an object": {`[1,2]`, "does not decode"},
		"wrong types":   {`{"ready":"yes"}`, "does not decode"},
		"negative":      {`{"resourceCount":-1}`, "negative"},
		"readiness":     {`{"podStatuses":[{"kind":"Pod","metadata":{"name":"p"},"readyStatus":"Fine"}]}`, `readyStatus "Fine"`},
		"custom ready":  {`{"resourceStatuses":[{"kind":"W","name":"w","readyStatus":""}]}`, "readyStatus"},
		"long reason":   {`{"podStatuses":[{"kind":"Pod","readyStatus":"Failed","reason":"` + strings.Repeat("r", 5000) + `"}]}`, "reason longer"},
		"long summary":  {`{"reason":"` + strings.Repeat("r", 20000) + `"}`, "reason is longer"},
		"long name":     {`{"podStatuses":[{"kind":"Pod","readyStatus":"Ready","metadata":{"name":"` + long + `"}}]}`, "name is longer"},
		"bad metadata":  {`{"podStatuses":[{"kind":"Pod","readyStatus":"Ready","metadata":{"name":7}}]}`, "metadata does not decode"},
		"custom name":   {`{"resourceStatuses":[{"kind":"W","name":"` + long + `","readyStatus":"Ready"}]}`, "name is longer"},
		"unwatched":     {`{"unwatchedKinds":[{"kind":"` + long + `"}]}`, "unwatched kind"},
	} {
		err := checkBundle([]byte(c.status))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}

// Only a live context that places the app on the cluster may receive its
// bundles; a context that ends takes its placements with it.
func TestPlacedBundlesOnly(t *testing.T) {
	m := &Manager{placed: map[appcontext.ClusterRef]map[string]map[string]bool{}}
	c1, c2 := appcontext.ClusterRef{Provider: "cp", Name: "c1"}, appcontext.ClusterRef{Provider: "cp", Name: "c2"}
	m.setPlaced("42", map[appcontext.ClusterRef]map[string]bool{c1: {"web": true}, c2: {"db": true}})
	for _, c := range []struct {
		ref     appcontext.ClusterRef
		id, app string
		want    bool
	}{
		{c1, "42", "web", true}, {c2, "42", "db", true}, {c1, "42", "db", false}, {c1, "43", "web", false},
		{c1, "42", "web/cluster/cp+c2", false}, {c2, "../42", "db", false},
	} {
		if _, got := m.placedContext(c.ref, c.id, c.app); got != c.want {
			t.Errorf("placedContext(%s, %q, %q) = %v", c.ref, c.id, c.app, got)
		}
	}
	m.setPlaced("42", map[appcontext.ClusterRef]map[string]bool{c1: {"web": true}}) // an update moved db away
	if placed(m, c2, "42", "db") || !placed(m, c1, "42", "web") {
		t.Fatal("placements not followed")
	}
	m.setPlaced("42", nil) // terminated
	if placed(m, c1, "42", "web") || len(m.placed) != 0 {
		t.Fatalf("a terminated context keeps placements: %v", m.placed)
	}
}

// FuzzBundle: whatever a cluster reports, the check never panics, and a
// bundle it accepts decodes, indexes and keeps to the limits.
func FuzzBundle(f *testing.F) {
	for _, s := range []string{goodBundle, `null`, `{}`, `{"podStatuses":[{"metadata":"x"}]}`, `{"resourceStatuses":[{"object":[[[[1]]]]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, status []byte) {
		if checkBundle(status) != nil {
			return
		}
		var st v1alpha1.ResourceBundleStateStatus
		if err := json.Unmarshal(status, &st); err != nil {
			t.Fatalf("accepted a status that does not decode: %v", err)
		}
		for _, e := range appcontext.IndexBundle(&st) {
			if len(e.Reason) > maxReason || len(e.Name) > maxName || len(e.Namespace) > maxName {
				t.Fatalf("accepted an entry over the limits: %+v", e)
			}
		}
	})
}

// A migrated DIG's context keeps its source's status context id, which
// labels the bundles: they are stored with the live context that keeps it.
func TestBundlesOfAKeptStatusID(t *testing.T) {
	m := &Manager{placed: map[appcontext.ClusterRef]map[string]map[string]bool{}, statusIDs: map[string]string{}}
	c1 := appcontext.ClusterRef{Provider: "cp", Name: "c1"}
	m.setPlaced("7", map[appcontext.ClusterRef]map[string]bool{c1: {"web": true}})
	m.setStatusID("7", "42") // the target of a migration from context 42
	if id, ok := m.placedContext(c1, "42", "web"); !ok || id != "7" {
		t.Fatalf("bundle labelled 42: %q %v, want context 7", id, ok)
	}
	if _, ok := m.placedContext(c1, "42", "db"); ok {
		t.Fatal("an app the context does not place is accepted")
	}
	if _, ok := m.placedContext(c1, "7", "web"); ok {
		t.Fatal("a bundle labelled with the context's own id is accepted although it keeps another")
	}
	m.setPlaced("7", nil)
	m.setStatusID("7", "")
	if _, ok := m.placedContext(c1, "42", "web"); ok || len(m.statusIDs) != 0 {
		t.Fatal("a context that ended still receives bundles")
	}
}

func placed(m *Manager, ref appcontext.ClusterRef, id, app string) bool {
	_, ok := m.placedContext(ref, id, app)
	return ok
}
