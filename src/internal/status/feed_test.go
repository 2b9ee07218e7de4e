package status

import (
	"encoding/json"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

func TestEntriesCarryBothViewsAndDigestOnlyWhatCounts(t *testing.T) {
	byKey := map[string]map[string]any{}
	digests := map[string]string{}
	for _, e := range Entries(fixture(), Query{}) {
		byKey[e.Key] = e.Payload
		digests[e.Key] = e.Digest
	}
	// 4 resources on edge01 (db's StatefulSet, sink's 3) + 2 pods + 3 on edge02.
	if len(byKey) != 9 {
		t.Fatalf("%d entries: %v", len(byKey), byKey)
	}
	dep := byKey["sink|cp|edge01|apps|v1|Deployment|default|fw0-sink"]
	if dep["rsync-status"] != "Applied" || dep["cluster-status"] != "Present" || dep["ready-status"] != "Pending" ||
		dep["reason"] != "1 of 2 replicas ready" || dep["app"] != "sink" || dep["status"] == nil {
		t.Fatalf("deployment entry = %v", dep)
	}
	if pod := byKey["sink|cp|edge01||v1|Pod|default|fw0-sink-1"]; pod["rsync-status"] != nil || pod["ready-status"] != "Pending" {
		t.Fatalf("pod entry = %v", pod)
	}
	if retry := byKey["sink|cp|edge02|apps|v1|Deployment|default|fw0-sink"]; retry["rsync-status"] != appcontext.RsyncRetrying || retry["cluster-status"] != Unknown {
		t.Fatalf("unreachable entry = %v", retry)
	}
	if got := Entries(fixture(), Query{Apps: []string{"db"}}); len(got) != 1 {
		t.Fatalf("app filter: %d entries", len(got))
	}

	// Metadata churn is no change; a .status change is.
	churn := fixture()
	p := churn.Context.Placements[1]
	var st map[string]any
	_ = json.Unmarshal(p.Bundle.Status, &st)
	d := st["deploymentStatuses"].([]any)[0].(map[string]any)
	d["metadata"].(map[string]any)["resourceVersion"] = "999"
	b, _ := json.Marshal(st)
	p.Bundle = &appcontext.BundleSnapshot{ResourceVersion: "8", Status: b}
	key := "sink|cp|edge01|apps|v1|Deployment|default|fw0-sink"
	if e := entryByKey(Entries(churn, Query{}), key); e.Digest != digests[key] {
		t.Fatal("a resourceVersion change changed the digest")
	}
	d["status"] = map[string]any{"readyReplicas": 2}
	b, _ = json.Marshal(st)
	p.Bundle = &appcontext.BundleSnapshot{ResourceVersion: "9", Status: b}
	if e := entryByKey(Entries(churn, Query{}), key); e.Digest == digests[key] {
		t.Fatal("a .status change left the digest alone")
	}
}

func entryByKey(l []Entry, key string) Entry {
	for _, e := range l {
		if e.Key == key {
			return e
		}
	}
	return Entry{}
}

// A sync change is a change for subscribers, and so is each heal; a Synced
// resource never healed digests as before sync states existed.
func TestEntriesChangeWithSyncAndHeals(t *testing.T) {
	key := "sink|cp|edge01||v1|Service|default|fw0-sink"
	in := fixture()
	svc := entryByKey(Entries(in, Query{}), key)
	if svc.Payload["syncStatus"] != "OutOfSync" || svc.Payload["heal"] == nil {
		t.Fatalf("the drifted service's entry: %v", svc.Payload)
	}
	p := in.Context.Placements[1]
	k := p.Resources[1].Key()
	st := p.Statuses[k]
	st.Heal = &appcontext.Heal{Count: 2, Streak: 2, By: appcontext.HealBySelfHeal, Was: "OutOfSync"}
	p.Statuses[k] = st
	if e := entryByKey(Entries(in, Query{}), key); e.Digest == svc.Digest {
		t.Fatal("a heal left the digest alone")
	}
	dep := entryByKey(Entries(fixture(), Query{}), "sink|cp|edge01|apps|v1|Deployment|default|fw0-sink")
	r := Build(fixture(), Query{Type: TypeCluster, Output: OutputDetail}).Apps[1].Clusters[0].Resources[0]
	var obj struct {
		Status json.RawMessage `json:"status"`
	}
	_ = json.Unmarshal(r.Detail, &obj)
	if dep.Payload["syncStatus"] != "Synced" || dep.Digest != Digest(r.ReadyStatus, r.Reason, appcontext.RsyncApplied, r.ClusterStatus, obj.Status) {
		t.Fatalf("a Synced resource's digest is not what it was before sync states: %v", dep.Payload)
	}
}

// A type=cluster subscription's answer is the entries' view less what its
// query did not ask for: the same answer and entries as building each on
// its own.
func TestFeedIsBuildAndEntries(t *testing.T) {
	inputs := map[string]func() Input{"fixture": fixture, "crashloop": func() Input { return crashLoop(t) }}
	queries := []Query{{}, {Apps: []string{"sink"}}, {Resources: []string{"Deployment"}}, {Sync: []string{"OutOfSync"}},
		{Clusters: []appcontext.ClusterRef{{Provider: "cp", Name: "edge01"}}}}
	for name, in := range inputs {
		for _, typ := range []string{TypeRsync, TypeCluster} {
			for _, out := range []string{OutputSummary, OutputAll, OutputDetail} {
				for _, q := range queries {
					q.Type, q.Output = typ, out
					entries, resp := feed(in(), q)
					wantResp, _ := json.Marshal(Build(in(), q))
					gotResp, _ := json.Marshal(resp)
					wantEntries, _ := json.Marshal(Entries(in(), q))
					gotEntries, _ := json.Marshal(entries)
					if string(gotResp) != string(wantResp) || string(gotEntries) != string(wantEntries) {
						t.Errorf("%s %+v:\nanswer  %s\nwant    %s\nentries %s\nwant    %s", name, q, gotResp, wantResp, gotEntries, wantEntries)
					}
				}
			}
		}
	}
}

// The DIG's status is built once for a type=cluster notification: its
// allocations are those of the entries alone, not the entries' and the
// answer's.
func TestFeedBuildsTheStatusOnce(t *testing.T) {
	in := fixture()
	for _, out := range []string{OutputAll, OutputDetail, OutputSummary} {
		q := Query{Type: TypeCluster, Output: out}
		build := testing.AllocsPerRun(50, func() { Build(in, q) })
		entries := testing.AllocsPerRun(50, func() { Entries(in, q) })
		both := testing.AllocsPerRun(50, func() { feed(in, q) })
		t.Logf("output=%s: answer %.0f allocs, entries %.0f, feed %.0f (was %.0f)", out, build, entries, both, build+entries)
		if both > entries+build/2 {
			t.Errorf("output=%s: feed made %.0f allocations; the entries alone make %.0f, the answer %.0f", out, both, entries, build)
		}
	}
}
