package gac

import (
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// MaxObjectBytes bounds an object GAC builds or patches, and what a GAC
// upload may carry. Kubernetes stores objects of at most about 1.5 MiB,
// so nothing larger could be applied; the bound keeps a patch — a "copy"
// doubles what it copies, so a few dozen of them would ask for terabytes —
// from costing the orchestrator more than a few MiB per cluster.
const MaxObjectBytes = 3 << 20

// MaxPatchOps bounds the operations of one JSON patch.
const MaxPatchOps = 1000

// patch returns obj changed by the customization's patch: a JSON patch
// (RFC 6902), or merge patches from its files — strategic for the kinds
// Kubernetes knows, RFC 7386 for the others. The result is at most
// MaxObjectBytes.
func patch(obj *unstructured.Unstructured, r Resource, c Customization) (*unstructured.Unstructured, error) {
	doc, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(c.Spec.PatchType) {
	case "json":
		p, err := jsonpatch.DecodePatch(c.Spec.PatchJSON)
		if err != nil {
			return nil, fmt.Errorf("patchJson: %w", err)
		}
		if len(p) > MaxPatchOps {
			return nil, fmt.Errorf("patchJson has %d operations, more than %d", len(p), MaxPatchOps)
		}
		opts := jsonpatch.NewApplyOptions()
		opts.AccumulatedCopySizeLimit = MaxObjectBytes
		if doc, err = p.ApplyWithOptions(doc, opts); err != nil {
			return nil, fmt.Errorf("apply patchJson to %s %q: %w", obj.GetKind(), obj.GetName(), err)
		}
	case "merge":
		files := mergeFiles(obj.GetKind(), c)
		if len(files) == 0 {
			return nil, fmt.Errorf("patchType merge needs a customization file holding the patch")
		}
		for _, f := range files {
			pj, err := yaml.YAMLToJSON(f.Content)
			if err != nil {
				return nil, fmt.Errorf("merge patch %s: %w", f.Name, err)
			}
			if doc, err = mergePatch(doc, pj, obj.GroupVersionKind()); err != nil {
				return nil, fmt.Errorf("merge patch %s into %s %q: %w", f.Name, obj.GetKind(), obj.GetName(), err)
			}
		}
	default:
		return nil, fmt.Errorf("patchType %q is not one of json, merge", c.Spec.PatchType)
	}
	if len(doc) > MaxObjectBytes {
		return nil, fmt.Errorf("the patched %s %q has %d bytes, more than the %d an object may have", obj.GetKind(), obj.GetName(), len(doc), MaxObjectBytes)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(doc); err != nil {
		return nil, fmt.Errorf("the patched %s %q is no longer an object: %w", obj.GetKind(), obj.GetName(), err)
	}
	return out, nil
}

func mergePatch(doc, p []byte, gvk schema.GroupVersionKind) ([]byte, error) {
	if typed, err := scheme.Scheme.New(gvk); err == nil {
		return strategicpatch.StrategicMergePatch(doc, p, typed)
	}
	return jsonpatch.MergePatch(doc, p)
}
