package render

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// The test binary doubles as the render worker of the pool tests.
func TestMain(m *testing.M) {
	if IsWorker(os.Args[1:]) {
		os.Exit(WorkerMain(os.Args[2:]))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			println("render: goroutines leaked:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func find(t *testing.T, rs []Resource, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, r := range rs {
		if r.GVK.Kind == kind {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(r.Manifest); err != nil {
				t.Fatal(err)
			}
			return u
		}
	}
	t.Fatalf("no %s in %s", kind, describe(rs))
	return nil
}

func replicas(t *testing.T, rs []Resource) int64 {
	n, _, _ := unstructured.NestedInt64(find(t, rs, "Deployment").Object, "spec", "replicas")
	return n
}

func message(t *testing.T, rs []Resource) string {
	s, _, _ := unstructured.NestedString(find(t, rs, "ConfigMap").Object, "data", "message")
	return s
}

// chartFiles reads testdata/web as path → content, relative to the chart.
func chartFiles(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir("testdata/web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel("testdata/web", p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// refused checks a render's error: ErrInvalid mentioning want when want
// is set (true: the case is done), none otherwise.
func refused(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, want)
	}
	return true
}

// packed lays the chart's files out under prefix ("web/", "./", "").
func packed(t testing.TB, prefix string, extra map[string]string) []byte {
	t.Helper()
	files := map[string]string{}
	for n, c := range chartFiles(t) {
		files[prefix+n] = c
	}
	for n, c := range extra {
		files[n] = c
	}
	return tgz.Files(t, files)
}

func TestRenderOrderAndDefaults(t *testing.T) {
	rs, err := Render(Options{Chart: tgz.Dir(t, "testdata/web"), ReleaseName: "fw0"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range rs {
		kinds = append(kinds, r.GVK.Kind)
		if !json.Valid(r.Manifest) || r.Object == nil {
			t.Fatalf("%s: manifest %q, object %v", r.Key(), r.Manifest, r.Object)
		}
	}
	// CRDs first, then Helm's install order; NOTES.txt is not a resource.
	if got := strings.Join(kinds, ","); got != "CustomResourceDefinition,ConfigMap,Service,Deployment" {
		t.Fatalf("order = %s", got)
	}
	if replicas(t, rs) != 1 || message(t, rs) != "from-chart" {
		t.Fatalf("defaults not applied: replicas %d message %q", replicas(t, rs), message(t, rs))
	}
	if d := find(t, rs, "Deployment"); d.GetName() != "fw0-web" {
		t.Fatalf("release name not used: %s", d.GetName())
	}
}

// Charts are accepted in every layout Helm and EMCO users pack them in.
func TestChartLayouts(t *testing.T) {
	cases := map[string]struct {
		chart     []byte
		chartName string
		want      string // error text; "" accepts
	}{
		"helm package (web/Chart.yaml)":  {chart: packed(t, "web/", nil)},
		"packed from inside (-C web .)":  {chart: packed(t, "./", nil)},
		"files at the root":              {chart: packed(t, "", nil)},
		"other top-level files are left": {chart: packed(t, "web/", map[string]string{"README.md": "hi"})},
		"several charts, one named":      {chart: packed(t, "web/", map[string]string{"other/Chart.yaml": "apiVersion: v2\nname: other\nversion: 1.0.0\n"}), chartName: "web"},
		"several charts, none named":     {chart: packed(t, "web/", map[string]string{"other/Chart.yaml": "apiVersion: v2\nname: other\nversion: 1.0.0\n"}), want: "several charts (other, web)"},
		"no Chart.yaml":                  {chart: tgz.Files(t, map[string]string{"x/readme": "hi"}), want: "no Chart.yaml"},
		"Chart.yaml too deep":            {chart: tgz.Files(t, map[string]string{"a/b/Chart.yaml": "name: x"}), want: "no Chart.yaml"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rs, err := Render(Options{Chart: tc.chart, ChartName: tc.chartName, ReleaseName: "r"})
			if refused(t, err, tc.want) {
				return
			}
			if len(rs) != 4 {
				t.Fatalf("rendered %s", describe(rs))
			}
		})
	}
}

func TestProfileLayouts(t *testing.T) {
	chart := tgz.Dir(t, "testdata/web")
	manifest := "version: v1\ntype:\n  values: override_values.yaml\n"
	values := "message: from-profile\n"
	for name, files := range map[string]map[string]string{
		"in a folder":        {"p/manifest.yaml": manifest, "p/override_values.yaml": values},
		"packed from inside": {"./manifest.yaml": manifest, "./override_values.yaml": values},
		"at the root":        {"manifest.yaml": manifest, "override_values.yaml": values},
	} {
		t.Run(name, func(t *testing.T) {
			rs, err := Render(Options{Chart: chart, Profile: tgz.Files(t, files), ReleaseName: "r"})
			if err != nil {
				t.Fatal(err)
			}
			if message(t, rs) != "from-profile" {
				t.Fatalf("message %q", message(t, rs))
			}
		})
	}
}

// A profile's configresource files replace the chart's before rendering,
// whatever the chart's layout; paths that leave either archive are refused.
func TestProfileConfigResource(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-web\ndata:\n  message: from-configresource\n"
	profile := func(chartpath string) []byte {
		return tgz.Files(t, map[string]string{
			"manifest.yaml":   "version: v1\ntype:\n  configresource:\n  - filepath: testfol/cm.yaml\n    chartpath: " + chartpath + "\n",
			"testfol/cm.yaml": cm,
		})
	}
	cases := map[string]struct {
		chart   []byte
		profile []byte
		want    string // error text; "" renders the profile's file
	}{
		"helm package":                 {chart: packed(t, "web/", nil), profile: profile("web/templates/configmap.yaml")},
		"packed from inside":           {chart: packed(t, "./", nil), profile: profile("web/templates/configmap.yaml")},
		"files at the root":            {chart: packed(t, "", nil), profile: profile("web/templates/configmap.yaml")},
		"files at the root, bare path": {chart: packed(t, "", nil), profile: profile("templates/configmap.yaml")},
		"outside the chart directory":  {chart: packed(t, "web/", nil), profile: profile("other/templates/configmap.yaml"), want: "not in the chart's directory"},
		"escaping with ..":             {chart: packed(t, "web/", nil), profile: profile("web/../../etc/passwd"), want: "not a path inside the chart"},
		"absolute":                     {chart: packed(t, "web/", nil), profile: profile("/etc/passwd"), want: "not a path inside the chart"},
		"missing profile file": {chart: packed(t, "web/", nil), profile: tgz.Files(t, map[string]string{
			"manifest.yaml": "type:\n  configresource:\n  - filepath: ../../etc/passwd\n    chartpath: web/templates/configmap.yaml\n"}), want: "which the archive lacks"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rs, err := Render(Options{Chart: tc.chart, Profile: tc.profile, ReleaseName: "r"})
			if refused(t, err, tc.want) {
				return
			}
			if message(t, rs) != "from-configresource" {
				t.Fatalf("message %q: the profile's file was not rendered", message(t, rs))
			}
		})
	}
}

func TestValuesPrecedence(t *testing.T) {
	profile := tgz.Files(t, map[string]string{
		"p/manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
		"p/override_values.yaml": "replicaCount: 2\nmessage: from-profile\n",
	})
	chart := tgz.Dir(t, "testdata/web")
	cases := map[string]struct {
		profile      []byte
		overrides    map[string]string
		wantReplicas int64
		wantMessage  string
	}{
		"chart only":          {nil, nil, 1, "from-chart"},
		"profile over chart":  {profile, nil, 2, "from-profile"},
		"overrides over all":  {profile, map[string]string{"replicaCount": "3"}, 3, "from-profile"},
		"dotted key, no file": {nil, map[string]string{"message": "from-override", "service.port": "8080"}, 1, "from-override"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rs, err := Render(Options{Chart: chart, Profile: tc.profile, ReleaseName: "r", Overrides: tc.overrides})
			if err != nil {
				t.Fatal(err)
			}
			if replicas(t, rs) != tc.wantReplicas || message(t, rs) != tc.wantMessage {
				t.Fatalf("replicas %d message %q", replicas(t, rs), message(t, rs))
			}
		})
	}
}

// Overrides are applied as `--set key=value` in key order, so keys that
// overlap give the same values whatever the map's order.
func TestOverridesAreStrvalsInKeyOrder(t *testing.T) {
	cases := map[string]struct {
		overrides map[string]string
		want      string
	}{
		"nested keys, typed as --set types them": {map[string]string{"image.repository": "x", "image.tag": "1"}, `{"image":{"repository":"x","tag":1}}`},
		"quotes are kept, as --set keeps them":   {map[string]string{"image.tag": `"1"`}, `{"image":{"tag":"\"1\""}}`},
		"list index":                             {map[string]string{"ports[0].port": "80"}, `{"ports":[{"port":80}]}`},
		"a child, then its parent":               {map[string]string{"a.b": "2", "b": "1"}, `{"a":{"b":2},"b":1}`},
		"comma sets two keys":                    {map[string]string{"a": "1,b=2"}, `{"a":1,"b":2}`},
		"escaped dot stays a dot":                {map[string]string{`annotations.x\.io/y`: "v"}, `{"annotations":{"x.io/y":"v"}}`},
	}
	// A key and its child clash, as `--set a=1 --set a.b=2` does in Helm;
	// in key order the clash is the same on every run.
	if _, err := Values(nil, map[string]string{"a.b": "2", "a": "1"}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `"a.b"`) {
		t.Fatalf("clash: %v", err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for range 20 { // map order varies from run to run
				vals, err := Values(nil, tc.overrides)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := json.Marshal(vals)
				if string(got) != tc.want {
					t.Fatalf("values %s, want %s", got, tc.want)
				}
			}
		})
	}
}

func TestBadInputIsInvalidWithHelmsReason(t *testing.T) {
	chart := tgz.Dir(t, "testdata/web")
	cases := map[string]struct {
		opts Options
		want string
	}{
		"wrong value type":         {Options{Chart: chart, Overrides: map[string]string{"replicaCount": "many"}}, "replicaCount"},
		"not gzip":                 {Options{Chart: []byte("hello")}, "not a gzip-compressed tar archive"},
		"gzip but not a chart":     {Options{Chart: tgz.Files(t, map[string]string{"x/readme": "hi"})}, "Chart.yaml"},
		"profile without manifest": {Options{Chart: chart, Profile: tgz.Files(t, map[string]string{"p/values.yaml": "a: 1"})}, "manifest.yaml"},
		"profile names a missing file": {Options{Chart: chart, Profile: tgz.Files(t, map[string]string{
			"manifest.yaml": "type: {values: nope.yaml}"})}, "nope.yaml"},
		"profile values outside the archive": {Options{Chart: chart, Profile: tgz.Files(t, map[string]string{
			"manifest.yaml": "type: {values: ../../etc/passwd}"})}, "lacks"},
		"chart with a link": {Options{Chart: linkedChart(t)}, "link"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(tc.opts)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

// linkedChart has a values.yaml that links out of the archive.
func linkedChart(t *testing.T) []byte {
	t.Helper()
	return tgz.Entries(t, tgz.Entry{Name: "c/Chart.yaml", Body: "apiVersion: v2\nname: c\nversion: 0.1.0\n"},
		tgz.Entry{Name: "c/values.yaml", Type: tar.TypeSymlink, Link: "/etc/passwd"})
}

func TestArchiveLimitsApply(t *testing.T) {
	chart := tgz.Dir(t, "testdata/web")
	_, err := Render(Options{Chart: chart, Limits: archive.Limits{MaxEntries: 3}})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("err = %v, want the archive's entry limit", err)
	}
}

func TestOutputLimit(t *testing.T) {
	chart := tgz.Dir(t, "testdata/web")
	_, err := Render(Options{Chart: chart, ReleaseName: "r", MaxOutput: 100})
	if !errors.Is(err, ErrLimit) || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "render limit is 100") {
		t.Fatalf("err = %v, want a render limit", err)
	}
}

// describe is a short description for failures: "3 resources: Deployment/web, ...".
func describe(rs []Resource) string {
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.GVK.Kind+"/"+r.Name)
	}
	return fmt.Sprintf("%d resources: %s", len(rs), strings.Join(names, ", "))
}
