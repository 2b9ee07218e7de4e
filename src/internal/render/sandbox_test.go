package render

import (
	"strings"
	"testing"

	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// TestTemplatesReachNothingOutside: a chart is the caller's program. It
// can read its own files and nothing else: lookup never reaches a
// cluster, getHostByName never resolves, env is not defined, and .Files
// names only the chart's entries.
func TestTemplatesReachNothingOutside(t *testing.T) {
	t.Setenv("ARGUS_SANDBOX_PROBE", "leaked") // a worker inherits the orchestrator's environment
	cm := func(data string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\ndata:\n" + data
	}
	render := func(tmpl string) (string, error) {
		chart := tgz.Files(t, map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n",
			"c/files/own.txt": "own", "c/templates/probe.yaml": tmpl})
		rs, err := Render(Options{Chart: chart, ReleaseName: "r"})
		if err != nil {
			return "", err
		}
		return string(rs[0].Manifest), nil
	}
	out, err := render(cm(`  lookup: {{ lookup "v1" "Secret" "kube-system" "" | toJson | quote }}
  dns: {{ getHostByName "localhost" | quote }}
  own: {{ .Files.Get "files/own.txt" | quote }}
  passwd: {{ .Files.Get "/etc/passwd" | quote }}
  up: {{ .Files.Get "../../../../etc/hostname" | quote }}
  glob: {{ .Files.Glob "/etc/*" | len | quote }}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"lookup":"{}"`, `"dns":""`, `"own":"own"`, `"passwd":""`, `"up":""`, `"glob":"0"`} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered %s, want %s", out, want)
		}
	}
	for _, fn := range []string{`{{ env "ARGUS_SANDBOX_PROBE" }}`, `{{ expandenv "$ARGUS_SANDBOX_PROBE" }}`} {
		out, err := render(cm("  x: " + fn + "\n"))
		if err == nil || strings.Contains(out, "leaked") {
			t.Errorf("%s: rendered %q, %v", fn, out, err)
		}
	}
}
