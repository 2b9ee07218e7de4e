package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// chromium finds headless Chromium: $ARGUS_CHROMIUM, or the distribution's
// package (Debian's "chromium") on the PATH.
func chromium() string {
	if p := os.Getenv("ARGUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// underCI reports whether CI is set (and not "false" or "0"), as .ci/run
// sets it: there a test that cannot run for want of a tool fails.
func underCI() bool {
	switch os.Getenv("CI") {
	case "", "false", "0":
		return false
	}
	return true
}

// browser starts headless Chromium with a fresh profile for one test and
// stops it (and waits for it) when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		const why = "headless Chromium not found: install the distribution's package (apt-get install chromium; `make test` does it as root), or set ARGUS_CHROMIUM"
		if underCI() {
			t.Fatal(why + " (CI is set: the browser tests fail instead of skipping)")
		}
		t.Skip(why)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.WindowSize(1400, 1000),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser
		cancel()
		cancelAlloc() // waits for the process
	})
	return ctx
}

// see waits (deadline d) until selector matches a visible element.
func see(t *testing.T, ctx context.Context, d time.Duration, what, selector string) time.Duration {
	t.Helper()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(selector))); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("%s: %s not shown after %s (%v); the page says:\n%.3000s", what, selector, d, err, body)
	}
	return time.Since(start)
}

func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	// Looked up and read in one script: the page re-renders as status
	// changes, and a node found in one call may be gone by the next
	// ("No node with given id found"). Between renders the element is
	// there again, so a miss is asked again, with a deadline.
	const missing = "__argus: no such element__"
	script := `(() => { const e = document.querySelector(` + jsString(selector) + `); return e === null ? "` + missing + `" : e.innerText })()`
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](script))
		switch {
		case err != nil:
			t.Fatalf("text of %s: %v", selector, err)
		case s != missing:
			return s
		case time.Now().After(deadline):
			t.Fatalf("text of %s: no such element", selector)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

// screenshot keeps a picture of the page when ARGUS_SCREENSHOTS names a
// directory, for a person to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("ARGUS_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
}

// TestConsoleFollowsAClusterInTheBrowser is issue 20's acceptance: the
// console at / renders in headless Chromium, names the onboarded DIG and
// shows it ready; a ConfigMap deleted in a cluster is shown NotPresent
// (overview, drill-down and its history) while the page stays open,
// through the stream; and GET …/status/history?resource= lists that move.
func TestConsoleFollowsAClusterInTheBrowser(t *testing.T) {
	sharedClusters(t)
	ctx := browser(t)
	o := readyDIG(t, "console")

	code, body := o.call("GET", "/", nil)
	if code != 200 || !strings.Contains(body, "<title>Argus console</title>") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	row := `#overview tr[data-subject="dig:p1/ca/v1/dig1"]`
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(o.base+"/")); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 60*time.Second, "the overview shows the DIG ready", row+`[data-ready="true"]`)
	t.Logf("overview rendered with the DIG ready %s after navigating", time.Since(start).Round(time.Millisecond))
	if s := text(t, ctx, row); !strings.Contains(s, "dig1") || !strings.Contains(s, "Ready") || !strings.Contains(s, "cache@cluster1") {
		t.Fatalf("overview row says %q", s)
	}
	screenshot(t, ctx, "overview-ready")

	// The drill-down: apps × clusters, resources, history, subscriptions.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+" a.subject"))); err != nil {
		t.Fatal(err)
	}
	cmRow := `#resource-table tr[data-kind="ConfigMap"][data-name="cache-config"][data-cluster="cp+cluster1"]`
	see(t, ctx, 60*time.Second, "the drill-down shows the ConfigMap present and ready", cmRow+`[data-cluster-status="Present"][data-ready-status="Ready"]`)
	see(t, ctx, 30*time.Second, "the drill-down says the DIG is ready", `#subject-ready .badge.ok`)
	see(t, ctx, 30*time.Second, "the history timeline", `#timeline li[data-kind="resource"]`)
	if s := text(t, ctx, "#grid"); !strings.Contains(s, "cache") || !strings.Contains(s, "cp+cluster2") {
		t.Fatalf("apps × clusters grid says %q", s)
	}
	// The page must not reload from here on: a marker set now survives only
	// in the same document.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.argusMarker = "same page"`)); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "drilldown-ready")

	// Delete the ConfigMap in cluster1: the page follows through the stream.
	cl := sim.Cluster("cluster1").Clientset()
	deleted := time.Now()
	if err := cl.CoreV1().ConfigMaps("default").Delete(context.Background(), "cache-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := see(t, ctx, 60*time.Second, "the drill-down shows the ConfigMap NotPresent", cmRow+`[data-cluster-status="NotPresent"]`)
	t.Logf("ConfigMap deleted in cluster1 → shown NotPresent in the open page after %s (target < 60s)", took.Round(time.Millisecond))
	see(t, ctx, 30*time.Second, "the timeline shows the move", `#timeline li[data-resource="ConfigMap/cache-config"][data-cluster="cp+cluster1"][data-to="NotPresent"]`)
	see(t, ctx, 30*time.Second, "the drill-down shows the ConfigMap Missing (desired against live)", cmRow+`[data-sync-status="Missing"]`)
	if marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.argusMarker || ""`)); err != nil || marker != "same page" {
		t.Fatalf("the page was reloaded (marker %q, %v)", marker, err)
	}
	screenshot(t, ctx, "drilldown-notpresent")

	// Back to the overview (in-page navigation): not ready, naming the ConfigMap.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#nav-overview"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 60*time.Second, "the overview lists the ConfigMap as not ready", row+`[data-ready="false"] li[data-resource="ConfigMap/cache-config"]`)
	see(t, ctx, 30*time.Second, "the overview's sync badge says one drifted", row+` td.sync .badge.bad`)
	screenshot(t, ctx, "overview-notpresent")
	t.Logf("deletion → overview shows it: %s", time.Since(deleted).Round(time.Millisecond))

	// The clusters page: both clusters Available, watched by this replica.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#nav-clusters"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the clusters page", `#clusters tr[data-cluster="cp+cluster2"]`)
	if s := text(t, ctx, `#clusters tr[data-cluster="cp+cluster1"]`); !strings.Contains(s, "Available") || !strings.Contains(s, "this replica") {
		t.Fatalf("clusters page row says %q", s)
	}
	screenshot(t, ctx, "clusters")

	// The API's history lists the ConfigMap's move to NotPresent, in time order.
	h := o.history("?resource=cache-config&cluster=cp%2Bcluster1")
	var moved *history.Entry
	for i, e := range h {
		if i > 0 && e.Time.Before(h[i-1].Time) {
			t.Fatalf("history not in time order: %+v", h)
		}
		if e.To != nil && e.To.ClusterStatus == status.NotPresent && e.From != nil && e.From.ClusterStatus == status.Present {
			moved = &h[i]
		}
		if e.Resource == nil || e.Resource.Name != "cache-config" {
			t.Fatalf("filtered history lists %+v", e)
		}
	}
	if moved == nil || moved.To.ReadyStatus != "NotPresent" || *moved.To.Ready || moved.Time.Before(deleted.Add(-time.Second)) {
		t.Fatalf("no Present → NotPresent entry after the deletion in %s", describeHistory(h))
	}
	t.Logf("history of cache-config on cluster1: %s", describeHistory(h))
}

// TestConsoleAsksForTheToken: with bearer tokens on, the page asks for one,
// keeps it for the session and shows the (empty) overview with it.
func TestConsoleAsksForTheToken(t *testing.T) {
	noClusters(t)
	ctx := browser(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("console-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	readers := filepath.Join(t.TempDir(), "readers")
	if err := os.WriteFile(readers, []byte("console-reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := startOrchestrator(t, testenv.UniqueName("consoleauth"), "/"+testenv.UniqueName("consoleauth"),
		func(opts *orchestrator.Options) { opts.AuthTokenFile, opts.AuthReadTokenFile = tokens, readers })
	if err := chromedp.Do(ctx, chromedp.Navigate(o.base+"/")); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the token dialog", "#login #token")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), "wrong"),
		chromedp.Click(chromedp.CSS("#login-submit"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "a refused token asks again", "#login-error")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), "console-secret"),
		chromedp.Click(chromedp.CSS("#login-submit"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the overview with the token", "#view h1")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](`document.querySelector("main").innerText.includes("Nothing is deployed yet")`)); err != nil {
		t.Fatalf("overview after the token: %q (%v)", text(t, ctx, "main"), err)
	}
	if stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("argus-api-token") || ""`)); err != nil || stored != "console-secret" {
		t.Fatalf("token kept in the session: %q %v", stored, err)
	}
	checkActionsNeedAWriteToken(t, ctx, o)
}

// checkActionsNeedAWriteToken: a DIG's drill-down offers its actions to a
// token that may write, and says read-only, with none, to a read token.
func checkActionsNeedAWriteToken(t *testing.T, ctx context.Context, o *orch) {
	t.Helper()
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v2/projects", meta("p1")},
		{"/v2/projects/p1/composite-apps", obj("ca", map[string]any{"compositeAppVersion": "v1"})},
		{caPath + "/composite-profiles", meta("cpf")},
		{caPath + "/deployment-intent-groups", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1"})},
	} {
		data, _ := json.Marshal(c.body)
		req, _ := http.NewRequest("POST", o.base+c.path, bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer console-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("POST %s: %v %v", c.path, resp, err)
		}
		resp.Body.Close()
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(o.base+"/#/dig/p1/ca/v1/dig1")); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the actions for a token that may write", "#actions #action-terminate")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#forget-token"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the token dialog again", "#login #token")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), "console-reader"), chromedp.Click(chromedp.CSS("#login-submit"))); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](`(document.querySelector("#actions") || {}).textContent === "read-only"`)); err != nil {
		t.Fatalf("a read token's drill-down: actions %q (%v)", text(t, ctx, "#actions"), err)
	}
}

// readyDIG starts an orchestrator (database and prefix named for the test),
// monitors, and the 3-app DIG on both clusters, waits until it is ready, and
// terminates it when the test ends, so the shared clusters are left clean.
func readyDIG(t *testing.T, name string) *orch {
	t.Helper()
	o := startOrchestrator(t, testenv.UniqueName(name), "/"+testenv.UniqueName(name))
	onboard(t, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	startMonitors(t, sim)
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	t.Cleanup(func() {
		o.must(202, "POST", digPath+"/terminate", nil)
		o.waitContext(id, "every resource Deleted", allResources(appcontext.RsyncDeleted))
	})
	o.waitStatus("type=cluster", "everything ready", everythingReady)
	return o
}

// history GETs the DIG's history with a query.
func (o *orch) history(query string) []history.Entry {
	o.t.Helper()
	body := o.must(200, "GET", digPath+"/status/history"+query, nil)
	var a struct {
		History []history.Entry `json:"history"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		o.t.Fatalf("decode history: %v\n%s", err, body)
	}
	return a.History
}

func describeHistory(l []history.Entry) string {
	var out []string
	for _, e := range l {
		side := func(s *history.State) string {
			if s == nil {
				return "-"
			}
			return s.RsyncStatus + "/" + s.ClusterStatus + "/" + s.ReadyStatus
		}
		out = append(out, fmt.Sprintf("#%d %s %s→%s", e.Seq, e.Time.Format("15:04:05.000"), side(e.From), side(e.To)))
	}
	return strings.Join(out, ", ")
}

// TestHistoryOverTheStream: a watch stream carries history events for its
// filters without disturbing its snapshot and change events, and
// history=false leaves them out: every event of that stream is checked,
// over two transitions (the ConfigMap deleted, then put back), until the
// other stream has carried the second's history.
func TestHistoryOverTheStream(t *testing.T) {
	sharedClusters(t)
	o := readyDIG(t, "hist")
	q := url.Values{"watch": {"true"}, "type": {"cluster"}, "resource": {"ConfigMap/backend-config"}}
	events := o.watch(t, digPath+"/status?"+q.Encode()+"&history=true")
	quiet := o.watch(t, digPath+"/status?"+q.Encode()+"&history=false")
	for _, ch := range []<-chan sse{events, quiet} {
		if first := <-ch; first.event != "snapshot" {
			t.Fatalf("first event %+v", first)
		}
	}
	cms := sim.Cluster("cluster2").Clientset().CoreV1().ConfigMaps("default")
	cm, err := cms.Get(context.Background(), "backend-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(context.Background(), "backend-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	quietChanges := followHistory(t, events, quiet, status.NotPresent, 0)
	cm.ResourceVersion, cm.UID, cm.CreationTimestamp, cm.ManagedFields = "", "", metav1.Time{}, nil
	if _, err := cms.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	followHistory(t, events, quiet, status.Present, quietChanges)
}

// followHistory reads both streams until the history=true one carried a
// change event and the history event of cluster2's ConfigMap becoming
// clusterStatus, and the history=false one a change event more than
// quietChanges (returned: its change events so far); any event of the
// history=false stream but a change fails the test.
func followHistory(t *testing.T, events, quiet <-chan sse, clusterStatus string, quietChanges int) int {
	t.Helper()
	var change, hist bool
	want := quietChanges + 1
	deadline := time.After(60 * time.Second)
	for !change || !hist || quietChanges < want {
		select {
		case ev := <-events:
			switch ev.event {
			case "change":
				change = true
			case "history":
				var e history.Entry
				if err := json.Unmarshal([]byte(ev.data), &e); err != nil || ev.id != "" {
					t.Fatalf("history event %+v: %v", ev, err)
				}
				if e.Resource == nil || e.Resource.Name != "backend-config" {
					t.Fatalf("a history event outside the stream's filter: %s", ev.data)
				}
				hist = hist || (e.Cluster == "cluster2" && e.To != nil && e.To.ClusterStatus == clusterStatus)
			}
		case ev := <-quiet:
			if ev.event != "change" {
				t.Fatalf("history=false stream sent %+v", ev)
			}
			quietChanges++
		case <-deadline:
			t.Fatalf("%s: after 60s: change event %v, history event %v; history=false stream: %d change events, want %d",
				clusterStatus, change, hist, quietChanges, want)
		}
	}
	return quietChanges
}
