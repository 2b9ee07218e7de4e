package gac

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Resource is one GAC resource of an intent with its uploaded file and
// customizations.
type Resource struct {
	Name string
	Spec catalog.GACResourceSpec
	// Template is the uploaded object (YAML or JSON); optional for a new
	// ConfigMap or Secret, which can be built from customization files.
	Template       []byte
	Customizations []Customization
}

// Customization is one customization with its uploaded files.
type Customization struct {
	Name  string
	Spec  catalog.CustomizationSpec
	Files []catalog.File
}

// Cluster is a cluster an app is placed on, with its labels.
type Cluster struct {
	Provider string
	Name     string
	Labels   []string
}

// Target is the rendered objects of one app on one cluster. Apply changes
// Objects in place and appends new ones.
type Target struct {
	App     string
	Cluster Cluster
	Objects []*unstructured.Unstructured
}

// Apply carries out the resources of one intent on the targets, as EMCO's
// generic action controller does: every customization of a resource
// selects clusters of the resource's app (all of them unless it is cluster
// specific) and, on each, adds the new object — built from the template,
// the customization's files and its patch — or patches the object the app
// already renders. A resource without customizations changes nothing.
// Errors are errdefs.ErrInvalid naming the resource and customization.
func Apply(resources []Resource, targets []*Target) error {
	for _, r := range resources {
		for _, c := range r.Customizations {
			if err := applyOne(r, c, targets); err != nil {
				return errdefs.InvalidWrap(err, "generic resource %q, customization %q", r.Name, c.Name)
			}
		}
	}
	return nil
}

func applyOne(r Resource, c Customization, targets []*Target) error {
	var built *unstructured.Unstructured
	if r.Spec.IsNew() {
		obj, err := newObject(r, c)
		if err != nil {
			return err
		}
		built = obj
	} else if c.Spec.PatchType == "" {
		return fmt.Errorf("a customization of an existing object needs a patchType")
	}
	for _, t := range targets {
		if t.App != r.Spec.App || !selects(c.Spec, t.Cluster) {
			continue
		}
		if built != nil {
			put(t, built.DeepCopy())
			continue
		}
		i := find(t.Objects, r.Spec.ResourceGVK.Kind, r.Spec.ResourceGVK.Name)
		if i < 0 {
			return fmt.Errorf("app %q renders no %s %q on cluster %s+%s", r.Spec.App, r.Spec.ResourceGVK.Kind,
				r.Spec.ResourceGVK.Name, t.Cluster.Provider, t.Cluster.Name)
		}
		patched, err := patch(t.Objects[i], r, c)
		if err != nil {
			return err
		}
		t.Objects[i] = patched
	}
	// A customization selecting no cluster of the app changes nothing, as in EMCO.
	return nil
}

// selects reports whether a customization applies on a cluster.
func selects(s catalog.CustomizationSpec, c Cluster) bool {
	if !s.IsClusterSpecific() {
		return true
	}
	info := s.ClusterInfo
	match := false
	if info.ClusterProvider == c.Provider {
		switch strings.ToLower(info.Scope) {
		case "label":
			match = slices.Contains(c.Labels, info.ClusterLabel)
		case "name":
			match = info.Cluster == c.Name
		}
	}
	if strings.EqualFold(info.Mode, "deny") {
		return !match
	}
	return match
}

// put adds obj to the target, replacing an object of the same kind,
// namespace and name (a later customization of the same resource wins).
func put(t *Target, obj *unstructured.Unstructured) {
	for i, o := range t.Objects {
		if o.GetKind() == obj.GetKind() && o.GetName() == obj.GetName() && o.GetNamespace() == obj.GetNamespace() {
			t.Objects[i] = obj
			return
		}
	}
	t.Objects = append(t.Objects, obj)
}

// find returns the index of the object of kind (any case) and name, or -1.
func find(objs []*unstructured.Unstructured, kind, name string) int {
	for i, o := range objs {
		if strings.EqualFold(o.GetKind(), kind) && o.GetName() == name {
			return i
		}
	}
	return -1
}

// newObject builds a new object: the template, for a ConfigMap or Secret
// the customization's files as data keys, then the patch.
func newObject(r Resource, c Customization) (*unstructured.Unstructured, error) {
	kind := strings.ToLower(r.Spec.ResourceGVK.Kind)
	var obj *unstructured.Unstructured
	switch {
	case len(r.Template) > 0:
		o, err := decode(r.Template)
		if err != nil {
			return nil, fmt.Errorf("the resource file: %w", err)
		}
		if !strings.EqualFold(o.GetKind(), r.Spec.ResourceGVK.Kind) {
			return nil, fmt.Errorf("the resource file holds a %s, resourceGVK says %s", o.GetKind(), r.Spec.ResourceGVK.Kind)
		}
		obj = o
	case kind == "configmap" || kind == "secret":
		obj = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": r.Spec.ResourceGVK.Name}}}
		if kind == "secret" {
			obj.SetKind("Secret")
			obj.Object["type"] = "Opaque"
		}
	default:
		return nil, fmt.Errorf("a new %s needs a resource file", r.Spec.ResourceGVK.Kind)
	}
	if obj.GetName() == "" {
		obj.SetName(r.Spec.ResourceGVK.Name)
	}
	switch strings.ToLower(obj.GetKind()) {
	case "configmap":
		if err := addData(obj, c, c.Spec.ConfigMapOptions, false); err != nil {
			return nil, err
		}
	case "secret":
		if err := addData(obj, c, c.Spec.SecretOptions, true); err != nil {
			return nil, err
		}
	}
	if c.Spec.PatchType == "" {
		return obj, nil
	}
	return patch(obj, r, c)
}

// addData adds each customization file that is not a merge patch as a data
// key: the file name, or the key name its option gives. Secret values are
// base64-encoded, as the API wants them.
func addData(obj *unstructured.Unstructured, c Customization, opts catalog.DataKeyOptions, secret bool) error {
	data, _, err := unstructured.NestedStringMap(obj.Object, "data")
	if err != nil {
		return fmt.Errorf("data of %s %q: %w", obj.GetKind(), obj.GetName(), err)
	}
	if data == nil {
		data = map[string]string{}
	}
	added := false
	for _, f := range c.Files {
		opt := option(opts, f.Name)
		if strings.EqualFold(opt.MergePatch, "true") {
			continue
		}
		key := f.Name
		if opt.KeyName != "" {
			key = opt.KeyName
		}
		if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
			return fmt.Errorf("%q is not a valid data key: %s", key, strings.Join(errs, "; "))
		}
		if _, dup := data[key]; dup {
			return fmt.Errorf("%s %q already has data key %q", obj.GetKind(), obj.GetName(), key)
		}
		value := string(f.Content)
		if secret {
			value = base64.StdEncoding.EncodeToString(f.Content)
		}
		data[key] = value
		added = true
	}
	if !added {
		return nil
	}
	return unstructured.SetNestedStringMap(obj.Object, data, "data")
}

func option(opts catalog.DataKeyOptions, file string) catalog.KeyOption {
	for _, o := range opts.DataKeyOptions {
		if o.FileName == file {
			return o
		}
	}
	return catalog.KeyOption{}
}

// mergeFiles are the customization files that hold merge patches: for a
// ConfigMap or Secret those marked mergePatch, for other kinds all of them.
func mergeFiles(kind string, c Customization) []catalog.File {
	var opts catalog.DataKeyOptions
	switch strings.ToLower(kind) {
	case "configmap":
		opts = c.Spec.ConfigMapOptions
	case "secret":
		opts = c.Spec.SecretOptions
	default:
		return c.Files
	}
	var out []catalog.File
	for _, f := range c.Files {
		if strings.EqualFold(option(opts, f.Name).MergePatch, "true") {
			out = append(out, f)
		}
	}
	return out
}

// decode reads one object from YAML or JSON.
func decode(data []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, err
	}
	return obj, nil
}

// SortResources orders resources and their customizations by name, so a
// plan does not depend on the order the store lists them in.
func SortResources(rs []Resource) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	for _, r := range rs {
		sort.Slice(r.Customizations, func(i, j int) bool { return r.Customizations[i].Name < r.Customizations[j].Name })
	}
}

// ValidatePatch checks a customization's patch fields when it is created:
// a known patch type, a JSON patch that decodes, and no value to be fetched
// from a URL (EMCO's "$(http...)$" lookups: Argus never dials addresses
// that callers name).
func ValidatePatch(s catalog.CustomizationSpec) error {
	switch strings.ToLower(s.PatchType) {
	case "":
		if len(s.PatchJSON) > 0 && string(s.PatchJSON) != "null" {
			return errdefs.Invalid("patchJson is set but patchType is not \"json\"")
		}
	case "json":
		ops, err := decodeJSONPatch(s.PatchJSON)
		if err != nil {
			return errdefs.InvalidWrap(err, "patchJson")
		}
		if len(ops) == 0 {
			return errdefs.Invalid("patchType json needs a non-empty patchJson")
		}
		if len(ops) > MaxPatchOps {
			return errdefs.Invalid("patchJson has %d operations, more than %d", len(ops), MaxPatchOps)
		}
		for _, op := range ops {
			if v, ok := op["value"].(string); ok && strings.HasPrefix(v, "$(http") && strings.HasSuffix(v, ")$") {
				return errdefs.Invalid("patch values looked up from a URL (%s) are not supported: Argus does not fetch addresses given in requests", v)
			}
		}
	case "merge":
	default:
		return errdefs.Invalid("patchType %q is not one of json, merge", s.PatchType)
	}
	return nil
}

func decodeJSONPatch(raw catalog.JSONValue) ([]map[string]any, error) {
	var ops []map[string]any
	if len(raw) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}
