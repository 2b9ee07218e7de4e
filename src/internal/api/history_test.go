package api

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/console"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/status"
)

// snapshots is a history.Source a test sets.
type snapshots map[string]status.Snapshot

func (s snapshots) Snapshot(_ context.Context, group string) (status.Snapshot, error) {
	snap, ok := s[group]
	if !ok {
		return status.Snapshot{}, errdefs.NotFound("no %s", group)
	}
	return snap, nil
}

func TestHistoryRoutes(t *testing.T) {
	store := history.NewStore(history.StoreOptions{Client: env.Etcd.Client, Prefix: env.EtcdPrefix()})
	f := newFixtureWith(t, func(o *Options) { o.History = store })
	for _, c := range [][2]string{
		{"/v2/projects", `{"metadata":{"name":"p"}}`},
		{"/v2/projects/p/composite-apps", `{"metadata":{"name":"ca"},"spec":{"compositeAppVersion":"v1"}}`},
		{"/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups", `{"metadata":{"name":"dig"},"spec":{"compositeProfile":"cpf","version":"r1"}}`},
	} {
		if code, body, _ := f.do(t, "POST", c[0], c[1]); code != 201 {
			t.Fatalf("POST %s: %d %s", c[0], code, body)
		}
	}
	const path = "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/dig/status/history"
	get := func(query string, want int) []history.Entry {
		t.Helper()
		code, body, h := f.do(t, "GET", path+query, "")
		if code != want {
			t.Fatalf("GET %s: %d %s, want %d", query, code, body, want)
		}
		if want != 200 {
			return nil
		}
		if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("content type %q", h.Get("Content-Type"))
		}
		var a struct {
			History []history.Entry `json:"history"`
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil || a.History == nil {
			t.Fatalf("body %s: %v (want a list, never null)", body, err)
		}
		return a.History
	}
	if l := get("", 200); len(l) != 0 {
		t.Fatalf("history before any change: %v", l)
	}

	// Two recorded states of the DIG: ready, then its ConfigMap gone.
	const group = "dig:p/ca/v1/dig"
	cm := status.ResourceKey{App: "sink", ClusterProvider: "cp", Cluster: "edge1", Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "sink-configmap"}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	src := snapshots{group: {Actions: []catalog.StateAction{{State: "Approved", TimeStamp: now.Add(-time.Minute)}}, Instance: "7", Status: "Instantiated", Ready: true,
		Resources: []status.ResourceState{{Key: cm, RsyncStatus: "Applied", ClusterStatus: "Present", ReadyStatus: "Ready"}}}}
	rec, err := history.NewRecorder(history.RecorderOptions{Store: store, Source: src, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rec.Record(ctx, group); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	src[group] = status.Snapshot{Actions: src[group].Actions, Instance: "7", Status: "Instantiated",
		Resources: []status.ResourceState{{Key: cm, RsyncStatus: "Applied", ClusterStatus: "NotPresent", ReadyStatus: "NotPresent", Reason: "not found in the cluster"}}}
	if err := rec.Record(ctx, group); err != nil {
		t.Fatal(err)
	}

	all := get("", 200)
	var kinds []string
	for i, e := range all {
		kinds = append(kinds, e.Kind)
		if i > 0 && e.Time.Before(all[i-1].Time) {
			t.Fatalf("not in time order: %+v", all)
		}
	}
	if strings.Join(kinds, ",") != "action,status,resource,status,resource" {
		t.Fatalf("kinds %v", kinds)
	}
	l := get("?resource=sink-configmap", 200)
	if len(l) != 2 || l[1].To.ClusterStatus != "NotPresent" || l[1].From.ClusterStatus != "Present" || l[1].Reason != "not found in the cluster" {
		t.Fatalf("the ConfigMap's history: %+v", l)
	}
	if l := get("?since="+url.QueryEscape(now.Format(time.RFC3339))+"&cluster=cp%2Bedge1", 200); len(l) != 1 {
		t.Fatalf("since and cluster: %+v", l)
	}
	get("?since=last-tuesday", 400)
	get("?cluster=edge1", 400)
	if code, _, _ := f.do(t, "GET", strings.Replace(path, "/dig/", "/nodig/", 1), ""); code != 404 {
		t.Fatalf("history of an unknown DIG: %d", code)
	}
	if code, _, _ := f.do(t, "GET", "/v1/instance/123/status/history", ""); code != 404 {
		t.Fatalf("history of an unknown instance: %d", code)
	}

	// Deleting the DIG drops its history.
	if code, body, _ := f.do(t, "DELETE", "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/dig", ""); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if l, _ := store.List(ctx, group, history.Filter{}); len(l) != 0 {
		t.Fatalf("history of a deleted DIG: %d entries", len(l))
	}
}

// The console's page and files are open (they hold no data) and sent with
// headers that keep them from being framed or running foreign scripts;
// the API behind them still needs the token.
func TestConsoleIsOpenTheAPIIsNot(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) {
		o.Console = console.Handler()
		o.Overview = stubOverviewData{}
		o.Tokens = tokenFunc(func(tok string) bool { return tok == "secret-token" })
	})
	code, body, h := f.doAuth(t, "GET", "/", "")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, "/console/app.js") {
		t.Fatalf("GET /: %d %q %.80s", code, h.Get("Content-Type"), body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || h.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("headers %v", h)
	}
	for file, ctype := range map[string]string{"app.js": "javascript", "app.css": "text/css"} {
		code, body, h := f.doAuth(t, "GET", "/console/"+file, "")
		if code != 200 || !strings.Contains(h.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("%s: %d %q", file, code, h.Get("Content-Type"))
		}
	}
	for _, p := range []string{"/console/nope.js", "/console/index.html", "/console/"} {
		if code, _, _ := f.doAuth(t, "GET", p, ""); code != 404 {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	if code, _, _ := f.doAuth(t, "GET", "/v2/overview", ""); code != 401 {
		t.Fatalf("overview without a token: %d", code)
	}
	code, body, _ = f.doAuth(t, "GET", "/v2/overview", "Bearer secret-token")
	if code != 200 || !strings.Contains(body, `"deploymentIntentGroups"`) {
		t.Fatalf("overview with the token: %d %s", code, body)
	}
	code, body, _ = f.doAuth(t, "GET", "/v2/overview/clusters", "Bearer secret-token")
	if code != 200 || !strings.Contains(body, `"replica":"r1"`) {
		t.Fatalf("clusters: %d %s", code, body)
	}
}

type stubOverviewData struct{}

func (stubOverviewData) Overview(context.Context) (status.Overview, error) {
	return status.Overview{DeploymentIntentGroups: []status.Summary{}, Instances: []status.Summary{}}, nil
}

func (stubOverviewData) ClusterOverview(context.Context) (status.ClusterOverview, error) {
	return status.ClusterOverview{Replica: "r1", Clusters: []status.ClusterState{}}, nil
}
