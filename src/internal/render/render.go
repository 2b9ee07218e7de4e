package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// DefaultMaxOutput bounds the manifests one render may produce.
const DefaultMaxOutput = 32 << 20

// ErrLimit marks a render stopped by one of its limits (time, memory,
// output size); such errors are also errdefs.ErrInvalid, as the chart and
// values that caused them are the caller's.
var ErrLimit = errors.New("render limit")

// limitError is both ErrLimit and errdefs.ErrInvalid.
type limitError struct{ msg string }

func (e *limitError) Error() string   { return e.msg }
func (e *limitError) Unwrap() []error { return []error{ErrLimit, errdefs.ErrInvalid} }

// LimitError reports a render stopped by a limit.
func LimitError(format string, args ...any) error {
	return &limitError{msg: fmt.Sprintf(format, args...)}
}

// Options says what to render.
type Options struct {
	// Chart is the chart archive (.tgz) in any layout LoadChart accepts.
	Chart []byte
	// ChartName picks the chart when the archive holds several top-level
	// chart directories (k8splugin's chart-name); "" accepts a single one.
	ChartName string
	// Profile is an optional profile archive (.tgz) holding manifest.yaml.
	Profile []byte
	// ReleaseName and Namespace are the release's; Namespace defaults to "default".
	ReleaseName string
	Namespace   string
	// Overrides are dotted keys with --set semantics ("image.tag": "1.2"),
	// applied in key order.
	Overrides map[string]string
	// Limits bound both archives; zero fields take archive's defaults.
	Limits archive.Limits
	// MaxOutput bounds the rendered manifests' total size in bytes; 0 means
	// DefaultMaxOutput.
	MaxOutput int64
	// Values, when set, are merged over the profile's values and the
	// overrides, winning over both (a v1 config's values).
	Values map[string]any
}

// Resource is one rendered object, in apply order.
type Resource struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string // as rendered; "" for cluster-scoped or unspecified
	// Manifest is the object as JSON, as rendered; Object is the same
	// decoded (a caller that changes Object marshals it again).
	Manifest []byte
	Object   *unstructured.Unstructured
	// Hook is set for a Helm hook (annotation helm.sh/hook): its events,
	// weight and delete policies. Hooks come after the other resources,
	// by weight, then kind and name; test hooks are not rendered.
	Hook *Hook
}

// Hook is a Helm hook's annotations.
type Hook struct {
	Events         []string
	Weight         int
	DeletePolicies []string
}

// Key identifies a resource within one app: Kind/namespace/name.
func (r Resource) Key() string { return r.GVK.Kind + "/" + r.Namespace + "/" + r.Name }

// LoadChart loads and checks a chart archive. It accepts the layouts Helm
// and EMCO users produce: `helm package` (files under one top-level
// directory, "mychart/Chart.yaml"), a folder packed from inside (`tar czf
// app.tgz -C mychart .`, "./Chart.yaml") and files at the root
// ("Chart.yaml"). Errors are ErrInvalid (or ErrTooLarge for an archive
// limit) with Helm's reason, so a corrupt upload is refused at the door.
func LoadChart(data []byte, chartName string, lim archive.Limits) (*chart.Chart, error) {
	files, root, err := readChart(data, chartName, lim)
	if err != nil {
		return nil, err
	}
	return loadFiles(files, root)
}

// readChart reads a chart archive and finds the chart's directory in it.
func readChart(data []byte, chartName string, lim archive.Limits) (map[string][]byte, string, error) {
	files, _, err := archive.Read(bytes.NewReader(data), lim, nil)
	if err != nil {
		return nil, "", err
	}
	root, err := chartRoot(files, chartName)
	return files, root, err
}

// loadFiles loads the chart under root from an archive's files.
func loadFiles(files map[string][]byte, root string) (*chart.Chart, error) {
	var buffered []*loader.BufferedFile
	for name, b := range files {
		rel, ok := under(root, name)
		if !ok {
			continue
		}
		buffered = append(buffered, &loader.BufferedFile{Name: rel, Data: bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))})
	}
	// Archive order does not matter to Helm, but a stable order keeps
	// errors and chart.Raw reproducible.
	sort.Slice(buffered, func(i, j int) bool { return buffered[i].Name < buffered[j].Name })
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "not a Helm chart")
	}
	if err := ch.Validate(); err != nil {
		return nil, errdefs.InvalidWrap(err, "invalid Helm chart")
	}
	return ch, nil
}

// chartRoot finds the directory holding Chart.yaml: the root, or a
// top-level directory (the one named chartName when there are several).
func chartRoot(files map[string][]byte, chartName string) (string, error) {
	if _, ok := files["Chart.yaml"]; ok {
		return "", nil
	}
	var roots []string
	for name := range files {
		if dir, rest, ok := strings.Cut(name, "/"); ok && rest == "Chart.yaml" {
			roots = append(roots, dir)
		}
	}
	sort.Strings(roots)
	switch {
	case len(roots) == 0:
		return "", errdefs.Invalid("not a Helm chart: the archive has no Chart.yaml at its root or in a top-level directory")
	case chartName != "":
		for _, r := range roots {
			if r == chartName {
				return r, nil
			}
		}
		if len(roots) == 1 {
			return roots[0], nil
		}
		return "", errdefs.Invalid("the archive holds charts %s, none named %q", strings.Join(roots, ", "), chartName)
	case len(roots) > 1:
		return "", errdefs.Invalid("the archive holds several charts (%s); name the one to use", strings.Join(roots, ", "))
	}
	return roots[0], nil
}

// under returns name relative to dir ("" is the root).
func under(dir, name string) (string, bool) {
	if dir == "" {
		return name, true
	}
	return strings.CutPrefix(name, dir+"/")
}

// MaxConfigResources bounds the files one profile copies over its chart's.
const MaxConfigResources = 64

// Profile is what a profile archive holds: the override values, and the
// files it copies over the chart's before rendering (k8splugin's
// configresource entries).
type Profile struct {
	Values    map[string]any
	Resources []ConfigResource
}

// ConfigResource is one profile file and the chart path it replaces,
// relative to the chart archive's root ("mychart/templates/x.yaml", as
// k8splugin's profiles name it).
type ConfigResource struct {
	ChartPath string
	Data      []byte
}

// ProfileValues reads a profile archive's override values (ReadProfile).
func ProfileValues(data []byte, lim archive.Limits) (map[string]any, error) {
	p, err := ReadProfile(data, lim)
	return p.Values, err
}

// ReadProfile reads a profile archive: manifest.yaml (at the root or in a
// single top-level directory) names the override values file in
// type.values and the files to copy over the chart's in
// type.configresource ({filepath, chartpath}). File paths are confined to
// the profile archive and chart paths to the chart archive: a path that
// leaves either is refused.
func ReadProfile(data []byte, lim archive.Limits) (Profile, error) {
	if len(data) == 0 {
		return Profile{}, nil
	}
	files, _, err := archive.Read(bytes.NewReader(data), lim, nil)
	if err != nil {
		return Profile{}, err
	}
	root := ""
	if _, ok := files["manifest.yaml"]; !ok {
		for name := range files {
			if dir, rest, ok := strings.Cut(name, "/"); ok && rest == "manifest.yaml" {
				if root != "" && root != dir {
					return Profile{}, errdefs.Invalid("profile archive holds several manifest.yaml files (%s, %s)", root, dir)
				}
				root = dir
			}
		}
		if root == "" {
			return Profile{}, errdefs.Invalid("profile archive has no manifest.yaml")
		}
	}
	at := func(name string) string { return path.Join(root, path.Clean("/" + name)[1:]) }
	var manifest struct {
		Version string `json:"version"`
		Type    struct {
			Values         string `json:"values"`
			ConfigResource []struct {
				FilePath  string `json:"filepath"`
				ChartPath string `json:"chartpath"`
			} `json:"configresource"`
		} `json:"type"`
	}
	if err := yaml.Unmarshal(files[at("manifest.yaml")], &manifest); err != nil {
		return Profile{}, errdefs.InvalidWrap(err, "profile manifest.yaml")
	}
	var out Profile
	if len(manifest.Type.ConfigResource) > MaxConfigResources {
		return out, errdefs.Invalid("profile manifest.yaml lists %d configresource entries; at most %d may be", len(manifest.Type.ConfigResource), MaxConfigResources)
	}
	for _, c := range manifest.Type.ConfigResource {
		raw, ok := files[at(c.FilePath)]
		if c.FilePath == "" || !ok {
			return out, errdefs.Invalid("profile configresource names file %q, which the archive lacks", c.FilePath)
		}
		cp, err := chartPath(c.ChartPath)
		if err != nil {
			return out, err
		}
		out.Resources = append(out.Resources, ConfigResource{ChartPath: cp, Data: raw})
	}
	if manifest.Type.Values == "" {
		return out, nil
	}
	raw, ok := files[at(manifest.Type.Values)]
	if !ok {
		return out, errdefs.Invalid("profile manifest.yaml names values file %q, which the archive lacks", manifest.Type.Values)
	}
	out.Values = map[string]any{}
	if err := yaml.Unmarshal(raw, &out.Values); err != nil {
		return out, errdefs.InvalidWrap(err, "profile values file %s", manifest.Type.Values)
	}
	return out, nil
}

// chartPath checks a configresource's chartpath: a relative path that
// stays inside the chart archive.
func chartPath(p string) (string, error) {
	c := path.Clean(p)
	if p == "" || path.IsAbs(p) || c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(p, 0) {
		return "", errdefs.Invalid("profile configresource chartpath %q is not a path inside the chart", p)
	}
	return c, nil
}

// overlay copies a profile's configresource files over the chart's files,
// as k8splugin does before it renders. A chart path names a file under
// the archive's root, the chart's directory first ("mychart/templates/
// x.yaml"); for a chart packed without a directory that first component
// is dropped. A path outside the chart's directory is refused.
func overlay(files map[string][]byte, root string, resources []ConfigResource) error {
	dirs := map[string]bool{}
	if root == "" {
		for name := range files {
			if dir, _, ok := strings.Cut(name, "/"); ok {
				dirs[dir] = true
			}
		}
	}
	for _, r := range resources {
		target := r.ChartPath
		switch {
		case root != "" && !strings.HasPrefix(target, root+"/"):
			return errdefs.Invalid("profile configresource chartpath %q is not in the chart's directory %s", r.ChartPath, root)
		case root == "":
			if first, rest, ok := strings.Cut(target, "/"); ok && !dirs[first] {
				target = rest
			}
		}
		files[target] = r.Data
	}
	return nil
}

// Values merges the profile's values and the overrides into the values
// given to Helm (the chart's own values lie underneath). Each override is
// applied as Helm applies `--set key=value` (EMCO and k8splugin pass them
// that way), in key order so that the result never depends on map order.
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

// Render renders the chart in this process: CRDs from crds/ first, then the
// templates in Helm's install order, then the hooks (marked, for rsync to
// run at their events). NOTES are not rendered. It is
// bounded in output size only; Pool runs it bounded in time and memory too.
func Render(opts Options) ([]Resource, error) {
	files, root, err := readChart(opts.Chart, opts.ChartName, opts.Limits)
	if err != nil {
		return nil, err
	}
	profile, err := ReadProfile(opts.Profile, opts.Limits)
	if err != nil {
		return nil, err
	}
	if err := overlay(files, root, profile.Resources); err != nil {
		return nil, err
	}
	ch, err := loadFiles(files, root)
	if err != nil {
		return nil, err
	}
	vals, err := Values(profile.Values, opts.Overrides)
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
	maxOutput := opts.MaxOutput
	if maxOutput == 0 {
		maxOutput = DefaultMaxOutput
	}
	release := chartutil.ReleaseOptions{Name: opts.ReleaseName, Namespace: ns, Revision: 1, IsInstall: true}
	renderVals, err := chartutil.ToRenderValues(ch, vals, release, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "values do not fit chart %s", ch.Name())
	}
	rendered, err := engine.Render(ch, renderVals)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "render chart %s", ch.Name())
	}
	total := int64(0)
	for name, content := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(rendered, name)
			continue
		}
		total += int64(len(content))
	}
	if maxOutput > 0 && total > maxOutput {
		return nil, LimitError("chart %s rendered %d bytes of manifests; the render limit is %d", ch.Name(), total, maxOutput)
	}
	hooks, manifests, err := releaseutil.SortManifests(rendered, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "chart %s produced invalid manifests", ch.Name())
	}
	return collect(ch, manifests, hooks)
}

// collect decodes the rendered objects in apply order: the chart's CRDs,
// its manifests, then its hooks.
func collect(ch *chart.Chart, manifests []releaseutil.Manifest, hooks []*release.Hook) ([]Resource, error) {
	var out []Resource
	seen := map[string]bool{}
	add := func(doc, source string, hook *Hook) error {
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
			if r.Manifest, err = json.Marshal(u.Object); err != nil {
				return fmt.Errorf("chart %s: %s: %w", ch.Name(), source, err)
			}
			seen[r.Key()] = true
			r.Hook = hook
			out = append(out, r)
		}
		return nil
	}
	for _, crd := range ch.CRDObjects() {
		if err := add(string(crd.File.Data), crd.Filename, nil); err != nil {
			return nil, err
		}
	}
	for _, m := range manifests {
		if err := add(m.Content, m.Name, nil); err != nil {
			return nil, err
		}
	}
	for _, h := range sortedHooks(hooks) {
		if err := add(h.Manifest, h.Path, hookOf(h)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sortedHooks drops test hooks, which are not deployed, and orders the
// rest as Helm runs them: by weight, then kind and name.
func sortedHooks(hooks []*release.Hook) []*release.Hook {
	var out []*release.Hook
	for _, h := range hooks {
		if hookOf(h) != nil {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Weight != b.Weight {
			return a.Weight < b.Weight
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return out
}

// hookOf is a hook's annotations, nil for a test hook.
func hookOf(h *release.Hook) *Hook {
	out := &Hook{Weight: h.Weight}
	for _, e := range h.Events {
		if e == release.HookTest {
			continue
		}
		out.Events = append(out.Events, string(e))
	}
	if len(out.Events) == 0 {
		return nil
	}
	for _, p := range h.DeletePolicies {
		out.DeletePolicies = append(out.DeletePolicies, string(p))
	}
	return out
}
