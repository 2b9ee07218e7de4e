package render

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// hostile is a chart whose one template is tmpl.
func hostile(t testing.TB, tmpl string) []byte {
	t.Helper()
	return tgz.Files(t, map[string]string{
		"bad/Chart.yaml":          "apiVersion: v2\nname: bad\nversion: 0.1.0\n",
		"bad/templates/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  x: |\n    " + tmpl + "\n",
		"bad/templates/ok.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n",
		"bad/templates/NOTES.txt": "notes",
	})
}

// Loops as the issue describes them: nested `range until 30000`, one
// silent (time) and one writing (memory and output).
const (
	loopSilent = `{{- range $i := until 30000 }}{{- range $j := until 30000 }}{{- end }}{{- end }}`
	loopOutput = `{{- range $i := until 30000 }}{{- range $j := until 30000 }}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{{- end }}{{- end }}`
)

func newPool(t testing.TB, opts PoolOptions) *Pool {
	t.Helper()
	p := NewPool(opts)
	t.Cleanup(p.Close)
	return p
}

func TestPoolRendersAsInProcess(t *testing.T) {
	p := newPool(t, PoolOptions{})
	opts := Options{Chart: tgz.Dir(t, "testdata/web"), ReleaseName: "fw0", Namespace: "ns",
		Overrides: map[string]string{"replicaCount": "3", "service.port": "8080"}}
	want, err := Render(opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Render(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("pool rendered %s, in process %s", describe(got), describe(want))
	}
	for i := range want {
		if got[i].Key() != want[i].Key() || got[i].GVK != want[i].GVK || string(got[i].Manifest) != string(want[i].Manifest) {
			t.Fatalf("resource %d: pool %s %s, in process %s %s", i, got[i].Key(), got[i].Manifest, want[i].Key(), want[i].Manifest)
		}
	}
	if name, err := p.CheckChart(context.Background(), opts.Chart, ""); err != nil || name != "web" {
		t.Fatalf("check chart: %q, %v", name, err)
	}
	// A config's values (k8splugin) reach the worker and win over the rest.
	opts.Values = map[string]any{"replicaCount": 5, "service": map[string]any{"port": 9090}}
	want, _ = Render(opts)
	got, err = p.Render(context.Background(), opts)
	if err != nil || len(got) != len(want) || string(got[2].Manifest) != string(want[2].Manifest) || !strings.Contains(string(got[3].Manifest), `"replicas":5`) {
		t.Fatalf("with values: %v\n%s", err, describe(got))
	}
}

func TestPoolKeepsErrorKinds(t *testing.T) {
	p := newPool(t, PoolOptions{})
	ctx := context.Background()
	chart := tgz.Dir(t, "testdata/web")
	if _, err := p.Render(ctx, Options{Chart: chart, Overrides: map[string]string{"replicaCount": "many"}}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "replicaCount") {
		t.Fatalf("bad value: %v", err)
	}
	if _, err := p.CheckChart(ctx, []byte("nope"), ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad chart: %v", err)
	}
	if err := p.CheckProfile(ctx, tgz.Files(t, map[string]string{"x": "y"})); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "manifest.yaml") {
		t.Fatalf("bad profile: %v", err)
	}
	big := NewPool(PoolOptions{Workers: 1, MaxOutput: 100})
	defer big.Close()
	if _, err := big.Render(ctx, Options{Chart: chart}); !errors.Is(err, ErrLimit) {
		t.Fatalf("output limit: %v", err)
	}
}

// A template loop is stopped by the time limit, a huge output by the
// memory limit; each costs one worker, and the next render works.
func TestPoolStopsHostileCharts(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, Timeout: 3 * time.Second, MemoryLimit: 256 << 20})
	ctx := context.Background()
	cases := map[string]struct {
		tmpl, want string
	}{
		"endless loop":   {loopSilent, "render time limit"},
		"endless output": {loopOutput, "limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := p.Render(ctx, Options{Chart: hostile(t, tc.tmpl), ReleaseName: "r"})
			if !errors.Is(err, ErrLimit) || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a render limit mentioning %q", err, tc.want)
			}
			t.Logf("stopped after %v: %v", time.Since(start), err)
			if _, err := p.Render(ctx, Options{Chart: tgz.Dir(t, "testdata/web"), ReleaseName: "r"}); err != nil {
				t.Fatalf("the next render failed: %v", err)
			}
		})
	}
}

func TestPoolRendersInParallelAndRecyclesWorkers(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 2, MaxRenders: 3})
	chart := tgz.Dir(t, "testdata/web")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := p.Render(context.Background(), Options{Chart: chart, ReleaseName: "r"})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestPoolCallerCancel(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Render(ctx, Options{Chart: hostile(t, loopSilent)})
		done <- err
	}()
	time.AfterFunc(200*time.Millisecond, cancel)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled render kept running")
	}
}

func TestPoolWithABrokenCommandFailsFast(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, Command: func(args []string) *exec.Cmd { return exec.Command("/nonexistent/argus") }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Render(ctx, Options{Chart: tgz.Dir(t, "testdata/web")})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestPoolCloseStopsEveryWorker(t *testing.T) {
	p := NewPool(PoolOptions{Workers: 2})
	if _, err := p.Render(context.Background(), Options{Chart: tgz.Dir(t, "testdata/web")}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	var pids []int
	for w := range p.live {
		pids = append(pids, w.cmd.Process.Pid)
	}
	p.mu.Unlock()
	p.Close()
	if alive := alive(pids); len(alive) > 0 {
		t.Fatalf("workers %v alive after Close", alive)
	}
	if _, err := p.Render(context.Background(), Options{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("render after Close: %v", err)
	}
}

// BenchmarkRenderInProcess and BenchmarkRenderPool render the same small
// chart (4 objects) with a profile and overrides; the difference is the
// pool's per-render overhead (framing, two pipe trips, decoding).
func BenchmarkRenderInProcess(b *testing.B) {
	opts := benchOptions(b)
	for b.Loop() {
		if _, err := Render(opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderPool(b *testing.B) {
	p := newPool(b, PoolOptions{Workers: 1})
	opts := benchOptions(b)
	ctx := context.Background()
	if _, err := p.Render(ctx, opts); err != nil { // the worker is warm
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Render(ctx, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderPoolParallel renders 20 apps at a time over two workers,
// as a 20-app DIG instantiates.
func BenchmarkRenderPoolParallel20(b *testing.B) {
	p := newPool(b, PoolOptions{Workers: 2})
	opts := benchOptions(b)
	ctx := context.Background()
	for b.Loop() {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := p.Render(ctx, opts); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

func benchOptions(b *testing.B) Options {
	return Options{Chart: tgz.Dir(b, "testdata/web"), ReleaseName: "fw0",
		Profile: tgz.Files(b, map[string]string{
			"p/manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
			"p/override_values.yaml": "replicaCount: 2\n",
		}),
		Overrides: map[string]string{"image": "nginx:1.28", "service.port": "8080"}}
}

func TestPoolMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := newPool(t, PoolOptions{Workers: 1, Timeout: 2 * time.Second, Metrics: m})
	ctx := context.Background()
	if _, err := p.Render(ctx, Options{Chart: tgz.Dir(t, "testdata/web")}); err != nil {
		t.Fatal(err)
	}
	_, _ = p.CheckChart(ctx, []byte("nope"), "")
	if _, err := p.Render(ctx, Options{Chart: hostile(t, loopSilent)}); !errors.Is(err, ErrLimit) {
		t.Fatalf("loop: %v", err)
	}
	for labels, want := range map[[2]string]float64{{"render", "ok"}: 1, {"chart", "invalid"}: 1, {"render", "limit"}: 1} {
		if got := value(t, m.requests.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("requests%v = %v, want %v", labels, got, want)
		}
	}
	// The killed worker is replaced in the background.
	deadline := time.Now().Add(30 * time.Second)
	for value(t, m.started) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	if got := value(t, m.started); got != 2 {
		t.Errorf("workers started = %v, want 2", got)
	}
}

// value reads a counter's current value.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// alive returns the pids that still name a live process.
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Helm hooks come after the chart's resources, marked, in weight order;
// test hooks are dropped; the pool carries the marks over.
func TestHooks(t *testing.T) {
	pod := func(name, annotations string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  annotations:\n" + annotations +
			"spec:\n  restartPolicy: Never\n  containers: [{name: c, image: busybox}]\n---\n"
	}
	chart := tgz.Files(t, map[string]string{
		"h/Chart.yaml": "apiVersion: v2\nname: h\nversion: 0.1.0\n",
		"h/templates/hooks.yaml": pod("post", "    helm.sh/hook: post-install\n    helm.sh/hook-delete-policy: hook-succeeded\n") +
			pod("pre-b", "    helm.sh/hook: pre-install\n    helm.sh/hook-weight: \"5\"\n") +
			pod("pre-a", "    helm.sh/hook: pre-install,pre-delete\n    helm.sh/hook-weight: \"-1\"\n") +
			pod("check", "    helm.sh/hook: test\n") +
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: main}\n",
	})
	want, err := Render(Options{Chart: chart, ReleaseName: "r"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := newPool(t, PoolOptions{}).Render(context.Background(), Options{Chart: chart, ReleaseName: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range [][]Resource{want, got} {
		var names []string
		for _, r := range rs {
			names = append(names, r.Name)
		}
		if strings.Join(names, ",") != "main,pre-a,post,pre-b" || rs[0].Hook != nil {
			t.Fatalf("order %v (main first, hooks by weight, the test hook dropped)", names)
		}
		if h := rs[1].Hook; h == nil || strings.Join(h.Events, ",") != "pre-install,pre-delete" || h.Weight != -1 || len(h.DeletePolicies) != 0 {
			t.Fatalf("pre-a hook %+v", h)
		}
		if h := rs[2].Hook; h == nil || strings.Join(h.DeletePolicies, ",") != "hook-succeeded" {
			t.Fatalf("post hook %+v", h)
		}
	}
}
