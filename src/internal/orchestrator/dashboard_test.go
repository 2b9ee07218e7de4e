package orchestrator

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"

	"github.com/argus-mc/argus/src/internal/monitor"
)

// dashboardFile is the Grafana dashboard shipped in deployments/.
const dashboardFile = "../../../deployments/grafana/argus.json"

// TestDashboardQueriesExportedMetrics: every query of the Grafana dashboard
// names only metrics the binary it selects exports — the orchestrator's
// ($orchestrator) as a running App registers them, the monitor's
// ($monitor) as monitor.New does — read from the registries themselves,
// so a renamed or removed metric fails here, not on a blank panel.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	r := start(t, Options{EtcdEndpoints: env.EtcdEndpoints(), MongoURI: env.MongoURI(),
		MongoDatabase: "dashboard", EtcdPrefix: "/dashboard"})
	orchestratorSeries, orchestratorNames := seriesOf(r.app.opts.Registry)
	monitorSeries, monitorNames := seriesOf(monitorRegistry(t))
	exported := map[string]map[string]bool{"orchestrator": orchestratorSeries, "monitor": monitorSeries}
	names := map[string][]string{"orchestrator": orchestratorNames, "monitor": monitorNames}
	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("only %d queries in %s", len(queries), dashboardFile)
	}
	used := map[string]bool{}
	for _, q := range queries {
		binary := ""
		for b := range exported {
			if strings.Contains(q.expr, "$"+b) {
				binary = b
			}
		}
		if binary == "" {
			t.Errorf("panel %q: query selects neither $orchestrator nor $monitor: %s", q.panel, q.expr)
			continue
		}
		selected := metricNames(q.expr)
		if len(selected) == 0 {
			t.Errorf("panel %q: no metric in %s", q.panel, q.expr)
		}
		for _, n := range selected {
			used[n] = true
			if !exported[binary][n] {
				t.Errorf("panel %q: %s does not export %s (query %s)", q.panel, binary, n, q.expr)
			}
		}
	}
	// Every Argus metric the binaries export has a panel, so a new one is
	// not forgotten.
	for binary, list := range names {
		for _, n := range list {
			if strings.HasPrefix(n, "argus_") && !used[n] && !used[n+"_bucket"] && !used[n+"_sum"] && !used[n+"_count"] {
				t.Errorf("%s exports %s, which no panel shows", binary, n)
			}
		}
	}
	t.Logf("%d queries over %d metrics", len(queries), len(used))
}

// seriesOf lists the series a registry's collectors describe (a
// histogram's are its _bucket, _sum and _count) and the metrics' names.
func seriesOf(reg *prometheus.Registry) (map[string]bool, []string) {
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	out := map[string]bool{}
	var names []string
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		out[m[1]] = true
		names = append(names, m[1])
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			out[m[1]+suffix] = true // histograms and summaries; a name never ends so by accident here
		}
	}
	return out, names
}

// monitorRegistry is the registry the monitor binary serves: the Go and
// process collectors (src/cmd/monitor) and what monitor.New registers. The
// client is never used: the monitor stops before it connects.
func monitorRegistry(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := monitor.New(monitor.Options{Config: &rest.Config{Host: "http://127.0.0.1:1"}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = m.Run(ctx) // stops its queues and informers at once
	return reg
}

type dashboardQuery struct{ panel, expr string }

// dashboardQueries reads every panel's Prometheus queries, rows' panels
// included.
func dashboardQueries(t *testing.T) []dashboardQuery {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", dashboardFile, err)
			}
			for _, tg := range p.Targets {
				out = append(out, dashboardQuery{p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return out
}

// promqlWords are PromQL's functions and keywords: never metric names.
var promqlWords = func() map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		by without on ignoring group_left group_right and or unless bool offset
		rate irate increase delta idelta deriv histogram_quantile clamp_min clamp_max abs ceil floor round
		label_replace label_join vector scalar time absent absent_over_time avg_over_time max_over_time
		min_over_time sum_over_time count_over_time last_over_time changes resets predict_linear sort sort_desc
		inf nan`) {
		out[w] = true
	}
	return out
}()

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlNumber   = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b`)
)

// metricNames lists the metric names a PromQL expression selects: what is
// left once strings, label matchers, ranges, grouping labels, numbers,
// functions and keywords are taken out.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	s = promqlNumber.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, id := range promqlIdent.FindAllString(s, -1) {
		if !promqlWords[strings.ToLower(id)] {
			seen[id] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestMetricNames(t *testing.T) {
	cases := map[string]string{
		`sum by (route, code) (rate(argus_http_requests_total{job=~"$orchestrator", code=~"5.."}[$__rate_interval]))`: "argus_http_requests_total",
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / clamp_min(b, 1e-9)`:                             "a_bucket b",
		`max by (instance) (go_goroutines{job="x"}) or on (instance) process_resident_memory_bytes`:                   "go_goroutines process_resident_memory_bytes",
	}
	for expr, want := range cases {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}
