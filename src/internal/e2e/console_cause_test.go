package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// TestConsoleLeadsWithTheCause is issue 29's acceptance for the console, in
// headless Chromium on the 3-app DIG over two clusters with a ConfigMap
// deleted and a pod crash-looping: the first two rows of the drill-down are
// the Failed pod and the missing ConfigMap (the Deployment failing for its
// pod comes after the causes); the pod sits under its ReplicaSet under its
// Deployment in the tree; filters put in the address reopen the same view,
// timeline included; a paused monitor is one grey line for its cluster in
// the overview, its time shown as the page shows times.
func TestConsoleLeadsWithTheCause(t *testing.T) {
	sharedClusters(t)
	ctx := browser(t)
	o, mons := causeDIG(t)
	page := o.base + "/#/dig/p1/ca/v1/dig1"
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 60*time.Second, "the drill-down says nothing is wrong", "#problems-none")

	if err := sim.Cluster("cluster1").Clientset().CoreV1().ConfigMaps("default").Delete(context.Background(), "cache-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := simcluster.SetPodState(context.Background(), sim.Cluster("cluster2").Clientset(), "default", "app=frontend", "crashloop")
	if err != nil {
		t.Fatal(err)
	}
	first := `#problems tbody tr:nth-child(1)[data-kind="Pod"][data-name="` + pod + `"][data-ready-status="Failed"]`
	second := `#problems tbody tr:nth-child(2)[data-kind="ConfigMap"][data-name="cache-config"][data-cluster="cp+cluster1"]`
	took := see(t, ctx, 60*time.Second, "the Failed pod first", first)
	see(t, ctx, 30*time.Second, "the missing ConfigMap second", second)
	see(t, ctx, 30*time.Second, "the Deployment failing for its pod, after the causes", `#problems tr[data-kind="Deployment"][data-name="frontend"][data-cluster="cp+cluster2"][data-ready-status="Failed"][data-derived="true"]`)
	t.Logf("ConfigMap deleted and pod %s crash-looping → first two rows of the drill-down after %s:\n%s", pod, took.Round(time.Millisecond), text(t, ctx, "#problems tbody"))
	screenshot(t, ctx, "cause-problems")

	checkPodUnderDeployment(t, ctx, pod)
	checkPanel(t, ctx, pod)
	see(t, ctx, 30*time.Second, "the timeline badges the readiness loss by what changed", `#timeline li[data-kind="status"][data-change="became not ready"]`)
	if s := text(t, ctx, `#timeline li[data-kind="status"][data-change="became not ready"]`); strings.Contains(s, "Instantiated\u00a0") || !strings.Contains(s, "became not ready") {
		t.Fatalf("status entry reads %q", s)
	}
	checkFiltersInTheAddress(t, ctx, o)
	checkActions(t, ctx)

	// A paused monitor: one grey line for its cluster in the overview.
	mons.stop("cluster2")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#nav-overview"))); err != nil {
		t.Fatal(err)
	}
	row := `#overview tr[data-subject="dig:p1/ca/v1/dig1"]`
	line := row + ` li[data-unknown-cluster="true"][data-cluster="cp+cluster2"]`
	took = see(t, ctx, 60*time.Second, "one overview line for the silent monitor's cluster", line+` .badge.unk`)
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(row+` li[data-cluster="cp+cluster2"]`)+`).length`))
	if err != nil || n != 1 {
		t.Fatalf("%d overview lines name cp+cluster2 (%v): %s", n, err, text(t, ctx, row))
	}
	s := text(t, ctx, line)
	if !strings.Contains(s, "monitor silent since") || regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:`).MatchString(s) {
		t.Fatalf("the cluster's line reads %q: want its reason with the time as the page shows times", s)
	}
	t.Logf("monitor of cluster2 stopped → one overview line after %s: %q", took.Round(time.Millisecond), s)
	screenshot(t, ctx, "cause-overview-silent")
}

// causeDIG is readyDIG with monitors that renew their Leases every second
// and an orchestrator that calls one silent after 4 s, so pausing one
// shows within seconds.
func causeDIG(t *testing.T) (*orch, *monitors) {
	t.Helper()
	o := startOrchestrator(t, testenv.UniqueName("cause"), "/"+testenv.UniqueName("cause"),
		func(opts *orchestrator.Options) {
			opts.MonitorSilentAfter, opts.Fleet.Heartbeat = 4*time.Second, time.Second
		})
	onboard(t, o, []any{map[string]any{"app": "frontend", "values": map[string]any{"replicaCount": "2"}}})
	mons := startMonitorsRenewing(t, sim, time.Second)
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	id := o.digState().ContextID
	t.Cleanup(func() {
		o.must(202, "POST", digPath+"/terminate", nil)
		o.waitContext(id, "every resource Deleted", allResources(appcontext.RsyncDeleted))
	})
	o.waitStatus("type=cluster", "everything ready", everythingReady)
	return o, mons
}

// checkPodUnderDeployment: the pod's row hangs under its ReplicaSet's,
// which hangs under the Deployment's.
func checkPodUnderDeployment(t *testing.T, ctx context.Context, pod string) {
	t.Helper()
	podRow := `#resource-table tr[data-kind="Pod"][data-name="` + pod + `"][data-cluster="cp+cluster2"]`
	see(t, ctx, 30*time.Second, "the pod in the tree", podRow)
	chain, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const rows = [...document.querySelectorAll('#resource-table tr[data-kind]')];
		const byKey = (k) => rows.find((r) => r.dataset.app + '|' + r.dataset.cluster + '|' + [r.dataset.kind === 'Deployment' || r.dataset.kind === 'ReplicaSet' ? 'apps' : '', r.dataset.kind, r.dataset.namespace || '', r.dataset.name].join('/') === k);
		let r = document.querySelector(`+jsString(podRow)+`);
		const out = [];
		while (r) { out.push(r.dataset.kind + ':' + r.dataset.depth); r = r.dataset.parent ? byKey(r.dataset.parent) : null; }
		return out.join(' < ');
	})()`))
	if err != nil || chain != "Pod:2 < ReplicaSet:1 < Deployment:0" {
		t.Fatalf("the pod's place in the tree: %q (%v)", chain, err)
	}
}

// checkPanel opens the side panel of the first two rows: the pod's live
// state and history (it has no manifest of Argus's), the ConfigMap's
// manifest as rsync applied it.
func checkPanel(t *testing.T, ctx context.Context, pod string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#problems tbody tr:nth-child(1)`))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the pod's panel", `#panel[data-resource="Pod/`+pod+`"] #panel-live dl`)
	see(t, ctx, 30*time.Second, "the pod's history in its panel", `#panel #panel-timeline li[data-resource="Pod/`+pod+`"]`)
	if s := text(t, ctx, "#panel"); !strings.Contains(s, "CrashLoopBackOff") || !strings.Contains(s, "Argus did not apply it") || !strings.Contains(s, "namespace default") {
		t.Fatalf("the pod's panel says:\n%s", s)
	}
	screenshot(t, ctx, "cause-panel-pod")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#problems tbody tr:nth-child(2)`))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the ConfigMap's manifest", `#panel[data-resource="ConfigMap/cache-config"] #panel-desired pre`)
	if s := text(t, ctx, "#panel-desired"); !strings.Contains(s, `"name": "cache-config"`) {
		t.Fatalf("the ConfigMap's desired manifest:\n%s", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#panel-close"))); err != nil {
		t.Fatal(err)
	}
}

// checkFiltersInTheAddress sets filters, then opens the address they
// produced in a fresh load: the same filters, rows and timeline.
func checkFiltersInTheAddress(t *testing.T, ctx context.Context, o *orch) {
	t.Helper()
	// As a user picks them: each select set, then its change event.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		for (const [id, v] of [['filter-app', 'frontend'], ['filter-cluster', 'cp+cluster2'], ['filter-ready', 'not']]) {
			const el = document.getElementById(id);
			el.value = v;
			el.dispatchEvent(new Event('change'));
		}
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	view := func() string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[
			document.querySelector('#filter-app').value, document.querySelector('#filter-cluster').value, document.querySelector('#filter-ready').value,
			[...document.querySelectorAll('#resource-table tr.clickable')].map((r) => r.dataset.kind + '/' + r.dataset.name).join(','),
			[...document.querySelectorAll('#timeline li')].every((l) => l.dataset.app === 'frontend' && l.dataset.cluster === 'cp+cluster2'),
		].join(' | ')`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := view()
	address, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if err != nil || !strings.Contains(address, "app=frontend") || !strings.Contains(address, "cluster=cp%2Bcluster2") || !strings.Contains(address, "ready=not") {
		t.Fatalf("the address %q does not carry the filters (%v)", address, err)
	}
	if !strings.HasPrefix(before, "frontend | cp+cluster2 | not | ") || !strings.HasSuffix(before, "| true") || !strings.Contains(before, "Pod/") {
		t.Fatalf("the filtered view: %s", before)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(o.base+"/#/clusters"), chromedp.Navigate(address), chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 30*time.Second, "the reopened drill-down", `#resource-table tr.clickable`)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](`document.querySelector('#filter-app') && document.querySelector('#filter-app').value === 'frontend' && document.querySelectorAll('#timeline li').length > 0`)); err != nil {
		t.Fatalf("reopened view: %s", view())
	}
	if after := view(); after != before {
		t.Fatalf("the address reopened another view:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("filters in the address %s reopen the same view: %s", address[strings.Index(address, "#"):], before)
	screenshot(t, ctx, "cause-filtered")
}

// checkActions: the API is open, so the page offers its actions, each
// behind a confirmation; cancelling does nothing.
func checkActions(t *testing.T, ctx context.Context) {
	t.Helper()
	see(t, ctx, 30*time.Second, "the actions", "#action-terminate")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#action-terminate"))); err != nil {
		t.Fatal(err)
	}
	see(t, ctx, 10*time.Second, "the confirmation", "#confirm #confirm-cancel")
	if s := text(t, ctx, "#confirm-text"); !strings.Contains(s, "Terminate p1") {
		t.Fatalf("confirmation says %q", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-cancel"))); err != nil {
		t.Fatal(err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#action-result').length`)); err != nil || n != 0 {
		t.Fatalf("a cancelled action ran (%d, %v)", n, err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
