package render

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Options says what to render.
type Options struct {
	// Chart is the chart archive (.tgz).
	Chart []byte
	// Profile is an optional profile archive (.tgz) holding manifest.yaml.
	Profile []byte
	// ReleaseName and Namespace are the release's; Namespace defaults to "default".
	ReleaseName string
	Namespace   string
	// Overrides are dotted keys with --set semantics ("image.tag": "1.2").
	Overrides map[string]string
	// Values, when set, are merged over the profile's values and the
	// overrides, winning over both (a v1 config's values).
	Values map[string]any
}

// Resource is one rendered object, in apply order.
type Resource struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string // as rendered; "" for cluster-scoped or unspecified
	Object    *unstructured.Unstructured
}

// Key identifies a resource within one app: Kind/namespace/name.
func (r Resource) Key() string { return r.GVK.Kind + "/" + r.Namespace + "/" + r.Name }

// LoadChart loads and checks a chart archive; errors are ErrInvalid with
// Helm's reason, so a corrupt upload is refused at the door.
func LoadChart(data []byte) (*chart.Chart, error) {
	if err := checkGzipTar(data); err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "not a Helm chart")
	}
	if err := ch.Validate(); err != nil {
		return nil, errdefs.InvalidWrap(err, "invalid Helm chart")
	}
	return ch, nil
}

// checkGzipTar refuses anything that is not a gzip-compressed tar archive.
func checkGzipTar(data []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return errdefs.InvalidWrap(err, "not a gzip-compressed tar archive")
	}
	if _, err := tar.NewReader(zr).Next(); err != nil {
		return errdefs.InvalidWrap(err, "not a gzip-compressed tar archive")
	}
	return nil
}

// ProfileValues reads a profile archive: manifest.yaml's type.values names
// the override values file. It returns nil values for a profile without one.
func ProfileValues(data []byte) (map[string]any, error) {
	if len(data) == 0 {
		return nil, nil
	}
	files, err := untar(data)
	if err != nil {
		return nil, err
	}
	manifestFile, ok := files["manifest.yaml"]
	if !ok {
		return nil, errdefs.Invalid("profile archive has no manifest.yaml")
	}
	var manifest struct {
		Version string `json:"version"`
		Type    struct {
			Values string `json:"values"`
		} `json:"type"`
	}
	if err := yaml.Unmarshal(manifestFile, &manifest); err != nil {
		return nil, errdefs.InvalidWrap(err, "profile manifest.yaml")
	}
	if manifest.Type.Values == "" {
		return nil, nil
	}
	raw, ok := files[path.Clean(manifest.Type.Values)]
	if !ok {
		return nil, errdefs.Invalid("profile manifest.yaml names values file %q, which the archive lacks", manifest.Type.Values)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		return nil, errdefs.InvalidWrap(err, "profile values file %s", manifest.Type.Values)
	}
	return vals, nil
}

// untar returns the regular files of a .tgz by path, with any single
// top-level directory stripped (profiles are often packed inside one).
func untar(data []byte) (map[string][]byte, error) {
	if err := checkGzipTar(data); err != nil {
		return nil, err
	}
	zr, _ := gzip.NewReader(bytes.NewReader(data))
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errdefs.InvalidWrap(err, "read archive")
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 16<<20))
		if err != nil {
			return nil, errdefs.InvalidWrap(err, "read archive")
		}
		files[path.Clean(strings.TrimPrefix(h.Name, "./"))] = b
	}
	// Strip one common top-level directory.
	prefix := ""
	for name := range files {
		dir, _, found := strings.Cut(name, "/")
		if !found || (prefix != "" && dir != prefix) {
			prefix = ""
			break
		}
		prefix = dir
	}
	if prefix != "" {
		stripped := make(map[string][]byte, len(files))
		for name, b := range files {
			stripped[strings.TrimPrefix(name, prefix+"/")] = b
		}
		files = stripped
	}
	return files, nil
}

// Values merges the profile's values and the overrides into the values
// given to Helm (the chart's own values lie underneath).
func Values(profile map[string]any, overrides map[string]string) (map[string]any, error) {
	vals := map[string]any{}
	if profile != nil {
		vals = chartutil.CoalesceTables(vals, copyMap(profile))
	}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := strvals.ParseInto(k+"="+overrides[k], vals); err != nil {
			return nil, errdefs.InvalidWrap(err, "override %q", k)
		}
	}
	return vals, nil
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = copyMap(sub)
		}
		out[k] = v
	}
	return out
}

// Render renders the chart: CRDs from crds/ first, then the templates in
// Helm's install order. Hooks and NOTES are not applied.
func Render(opts Options) ([]Resource, error) {
	ch, err := LoadChart(opts.Chart)
	if err != nil {
		return nil, err
	}
	profile, err := ProfileValues(opts.Profile)
	if err != nil {
		return nil, err
	}
	vals, err := Values(profile, opts.Overrides)
	if err != nil {
		return nil, err
	}
	if opts.Values != nil {
		vals = chartutil.CoalesceTables(copyMap(opts.Values), vals)
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	release := chartutil.ReleaseOptions{Name: opts.ReleaseName, Namespace: ns, Revision: 1, IsInstall: true}
	renderVals, err := chartutil.ToRenderValues(ch, vals, release, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "values do not fit chart %s", ch.Name())
	}
	files, err := engine.Render(ch, renderVals)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "render chart %s", ch.Name())
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "chart %s produced invalid manifests", ch.Name())
	}
	var out []Resource
	seen := map[string]bool{}
	add := func(doc, source string) error {
		for _, part := range releaseutil.SplitManifests(doc) {
			// Decode as Kubernetes clients do, so numbers are int64.
			js, err := yaml.YAMLToJSON([]byte(part))
			if err != nil {
				return errdefs.InvalidWrap(err, "chart %s: %s", ch.Name(), source)
			}
			if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				return errdefs.InvalidWrap(err, "chart %s: %s", ch.Name(), source)
			}
			r := Resource{GVK: u.GroupVersionKind(), Name: u.GetName(), Namespace: u.GetNamespace(), Object: u}
			if r.GVK.Kind == "" || r.GVK.Version == "" || r.Name == "" {
				return errdefs.Invalid("chart %s: %s: object without apiVersion, kind or metadata.name", ch.Name(), source)
			}
			if seen[r.Key()] {
				return errdefs.Invalid("chart %s renders %s twice", ch.Name(), r.Key())
			}
			seen[r.Key()] = true
			out = append(out, r)
		}
		return nil
	}
	for _, crd := range ch.CRDObjects() {
		if err := add(string(crd.File.Data), crd.Filename); err != nil {
			return nil, err
		}
	}
	for _, m := range manifests {
		if err := add(m.Content, m.Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Describe is a short description for logs: "3 resources: Deployment/web, ...".
func Describe(rs []Resource) string {
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.GVK.Kind+"/"+r.Name)
	}
	return fmt.Sprintf("%d resources: %s", len(rs), strings.Join(names, ", "))
}
