package rsync

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// Server-side apply checks an applied object against the kind's schema
// strictly, whatever fieldValidation says: a field the schema lacks (a
// DaemonSet's spec.replicas, common in real charts) fails the whole apply
// with a 500 and no reason. Create and update, which Helm and EMCO use,
// drop such fields under fieldValidation=Warn and say so in a warning. To
// deploy what they deploy, rsync does the same before applying: it prunes
// the fields the cluster's published OpenAPI schema does not declare and
// records a warning for each, worded as the API server words its own.

// schemaCheckable reports an apply error that a schema mismatch may have
// caused: a 500 without a reason (the field manager's typed conversion).
func schemaCheckable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	st := status.Status()
	return st.Code == 500 && st.Reason == metav1.StatusReasonUnknown
}

// gvSchema is one group-version's types, as the cluster publishes them.
type gvSchema struct {
	parser *typed.Parser
	types  map[schema.GroupVersionKind]string
}

// schemas caches a cluster's schemas per group-version; reset when its
// API changes (a CRD's schema may have).
type schemas struct {
	mu   sync.Mutex
	byGV map[schema.GroupVersion]*gvSchema
}

func (s *schemas) reset() {
	s.mu.Lock()
	s.byGV = nil
	s.mu.Unlock()
}

// get returns the schema of gv, fetching it once from the cluster's
// OpenAPI v3 document for that group-version.
func (s *schemas) get(disc discovery.DiscoveryInterface, gv schema.GroupVersion) (*gvSchema, error) {
	s.mu.Lock()
	if g := s.byGV[gv]; g != nil {
		s.mu.Unlock()
		return g, nil
	}
	s.mu.Unlock()
	doc, err := openapi3.NewRoot(disc.OpenAPIV3()).GVSpec(gv)
	if err != nil {
		return nil, fmt.Errorf("read the OpenAPI schema of %s: %w", gv, err)
	}
	if doc.Components == nil {
		return nil, fmt.Errorf("the OpenAPI schema of %s has no components", gv)
	}
	g, err := newGVSchema(doc.Components.Schemas)
	if err != nil {
		return nil, fmt.Errorf("the OpenAPI schema of %s: %w", gv, err)
	}
	s.mu.Lock()
	if s.byGV == nil {
		s.byGV = map[schema.GroupVersion]*gvSchema{}
	}
	s.byGV[gv] = g
	s.mu.Unlock()
	return g, nil
}

func newGVSchema(models map[string]*spec.Schema) (*gvSchema, error) {
	sch, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		return nil, err
	}
	g := &gvSchema{parser: &typed.Parser{Schema: smdschema.Schema{Types: sch.Types}}, types: map[schema.GroupVersionKind]string{}}
	for name, m := range models {
		for _, gvk := range modelKinds(m) {
			g.types[gvk] = name
		}
	}
	return g, nil
}

// modelKinds reads a model's x-kubernetes-group-version-kind extension.
func modelKinds(m *spec.Schema) []schema.GroupVersionKind {
	list, _ := m.Extensions["x-kubernetes-group-version-kind"].([]any)
	var out []schema.GroupVersionKind
	for _, item := range list {
		if mm, ok := item.(map[string]any); ok {
			g, _ := mm["group"].(string)
			v, _ := mm["version"].(string)
			k, _ := mm["kind"].(string)
			if v != "" && k != "" {
				out = append(out, schema.GroupVersionKind{Group: g, Version: v, Kind: k})
			}
		}
	}
	return out
}

// errSchema is an object that does not fit its kind's schema, in ways
// pruning cannot mend (a string where a number belongs).
type errSchema struct {
	kind string
	errs typed.ValidationErrors
}

func (e errSchema) Error() string {
	return fmt.Sprintf("the object does not match the cluster's schema of %s: %v", e.kind, e.errs)
}

// errUnknownFields is what strict field validation makes of unknown fields.
type errUnknownFields struct{ fields []string }

func (e errUnknownFields) Error() string {
	return fmt.Sprintf("unknown fields %q (strict field validation refuses them)", e.fields)
}

// check prunes from obj (an object's content) every field the kind's
// schema does not declare, returning their paths, and then validates what
// remains. ok is false when the schema does not know the kind.
func (g *gvSchema) check(gvk schema.GroupVersionKind, obj map[string]any) (dropped []string, ok bool, err error) {
	name, found := g.types[gvk]
	if !found {
		return nil, false, nil
	}
	tr := smdschema.TypeRef{NamedType: &name}
	prune(&g.parser.Schema, tr, obj, "", &dropped)
	sort.Strings(dropped)
	if _, verr := g.parser.Type(name).FromUnstructured(obj); verr != nil {
		var errs typed.ValidationErrors
		if errors.As(verr, &errs) {
			return dropped, true, errSchema{kind: gvk.Kind, errs: errs}
		}
		return dropped, true, fmt.Errorf("the object does not match the cluster's schema of %s: %w", gvk.Kind, verr)
	}
	return dropped, true, nil
}

// prune deletes from v the map keys the schema does not declare, as the
// API server does for create and update; paths are written as in its
// warnings ("spec.template.spec.containers[0].bogus").
func prune(s *smdschema.Schema, tr smdschema.TypeRef, v any, path string, dropped *[]string) {
	atom, ok := s.Resolve(tr)
	if !ok {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		if atom.Map == nil {
			return // a type mismatch: validation reports it
		}
		for k, child := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if f, found := atom.FindField(k); found {
				prune(s, f.Type, child, p, dropped)
				continue
			}
			if (atom.Map.ElementType != smdschema.TypeRef{}) {
				prune(s, atom.Map.ElementType, child, p, dropped)
				continue
			}
			delete(v, k)
			*dropped = append(*dropped, p)
		}
	case []any:
		if atom.List == nil {
			return
		}
		for i, e := range v {
			prune(s, atom.List.ElementType, e, path+"["+strconv.Itoa(i)+"]", dropped)
		}
	}
}
