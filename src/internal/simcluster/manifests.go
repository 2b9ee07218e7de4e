package simcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// These helpers do what kubectl would, for the tests and the demo, which run
// on machines without kubectl.

// DecodeManifests splits multi-document YAML (or JSON) into objects.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// ApplyOptions configures Apply and ApplyFiles.
type ApplyOptions struct {
	// FieldManager owns the applied fields; "" means "argus-simcluster".
	FieldManager string
	// DryRun validates on the server without storing anything.
	DryRun bool
}

// ApplyFiles server-side applies every object in the files, in order, as
// `kubectl apply --server-side` would, and returns the objects.
func ApplyFiles(ctx context.Context, cfg *rest.Config, opts ApplyOptions, paths ...string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		o, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		objs = append(objs, o...)
	}
	return objs, Apply(ctx, cfg, opts, objs...)
}

// Apply server-side applies objects in order. A kind the API server does not
// know yet (a CRD applied just before) is looked up again once.
func Apply(ctx context.Context, cfg *rest.Config, opts ApplyOptions, objs ...*unstructured.Unstructured) error {
	if opts.FieldManager == "" {
		opts.FieldManager = "argus-simcluster"
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	force := true
	patchOpts := metav1.PatchOptions{FieldManager: opts.FieldManager, Force: &force}
	if opts.DryRun {
		patchOpts.DryRun = []string{metav1.DryRunAll}
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset()
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, patchOpts); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// WaitEstablished waits until the named CRDs are Established and served.
func WaitEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, name := range names {
		for {
			crd, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("get CRD %s: %w", name, err)
			}
			if err == nil && established(crd) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
			case <-time.After(100 * time.Millisecond): // poll the API server
			}
		}
	}
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// PodStates are the values of StateAnnotation that kwok acts on.
var PodStates = []string{"not-ready", "crashloop", "failed", "succeeded", "ready"}

// SetPodState annotates the first pod (by name) in namespace matching
// selector with StateAnnotation=state, so kwok moves it to that state, and
// returns the pod's name. Only scheduled pods count: kwok drives no others.
func SetPodState(ctx context.Context, cs kubernetes.Interface, namespace, selector, state string) (string, error) {
	if !slices.Contains(PodStates, state) {
		return "", fmt.Errorf("%w: pod state %q is not one of %v", ErrInvalid, state, PodStates)
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "", fmt.Errorf("list pods %q in %s: %w", selector, namespace, err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no scheduled pod matches %q in namespace %s", selector, namespace)
	}
	slices.Sort(names)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, StateAnnotation, state)
	if _, err := cs.CoreV1().Pods(namespace).Patch(ctx, names[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("annotate pod %s/%s: %w", namespace, names[0], err)
	}
	return names[0], nil
}
