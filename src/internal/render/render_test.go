package render

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

func find(t *testing.T, rs []Resource, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, r := range rs {
		if r.GVK.Kind == kind {
			return r.Object
		}
	}
	t.Fatalf("no %s in %s", kind, Describe(rs))
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

func TestRenderOrderAndDefaults(t *testing.T) {
	rs, err := Render(Options{Chart: testenv.Archive(t, "testdata/web"), ReleaseName: "fw0"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range rs {
		kinds = append(kinds, r.GVK.Kind)
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

func TestValuesPrecedence(t *testing.T) {
	profile := testenv.ArchiveFiles(t, map[string]string{
		"p/manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
		"p/override_values.yaml": "replicaCount: 2\nmessage: from-profile\n",
	})
	chart := testenv.Archive(t, "testdata/web")
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

func TestBadInputIsInvalidWithHelmsReason(t *testing.T) {
	chart := testenv.Archive(t, "testdata/web")
	cases := map[string]struct {
		opts Options
		want string
	}{
		"wrong value type":         {Options{Chart: chart, Overrides: map[string]string{"replicaCount": "many"}}, "replicaCount"},
		"not gzip":                 {Options{Chart: []byte("hello")}, "not a gzip-compressed tar archive"},
		"gzip but not a chart":     {Options{Chart: testenv.ArchiveFiles(t, map[string]string{"x/readme": "hi"})}, "Chart.yaml"},
		"profile without manifest": {Options{Chart: chart, Profile: testenv.ArchiveFiles(t, map[string]string{"p/values.yaml": "a: 1"})}, "manifest.yaml"},
		"profile names a missing file": {Options{Chart: chart, Profile: testenv.ArchiveFiles(t, map[string]string{
			"manifest.yaml": "type: {values: nope.yaml}"})}, "nope.yaml"},
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
