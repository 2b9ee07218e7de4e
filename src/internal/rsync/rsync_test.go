package rsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

func TestDecorateLabelsObjectsAndTemplates(t *testing.T) {
	labels := bundleLabels("42", "web")
	cases := map[string]struct {
		obj   map[string]any
		paths [][]string
	}{
		"deployment": {map[string]any{"kind": "Deployment", "metadata": map[string]any{"labels": map[string]any{"keep": "me"}},
			"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{}}}},
			[][]string{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}}},
		"cronjob": {map[string]any{"kind": "CronJob", "metadata": map[string]any{}},
			[][]string{{"metadata", "labels"}, {"spec", "jobTemplate", "spec", "template", "metadata", "labels"}, {"spec", "jobTemplate", "metadata", "labels"}}},
		"configmap": {map[string]any{"kind": "ConfigMap", "metadata": map[string]any{}}, [][]string{{"metadata", "labels"}}},
	}
	for name, tc := range cases {
		u := &unstructured.Unstructured{Object: tc.obj}
		decorate(u, labels)
		for _, p := range tc.paths {
			got, _, _ := unstructured.NestedStringMap(u.Object, p...)
			if got["emco/deployment-id"] != "42-web" || got["argus.io/context-id"] != "42" || got["argus.io/app"] != "web" {
				t.Errorf("%s: %v = %v", name, p, got)
			}
		}
	}
	sts := &unstructured.Unstructured{Object: map[string]any{"kind": "StatefulSet",
		"spec": map[string]any{"volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}}}}}}
	decorate(sts, labels)
	vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	if l, _, _ := unstructured.NestedStringMap(vcts[0].(map[string]any), "metadata", "labels"); l["emco/deployment-id"] != "42-web" {
		t.Errorf("volume claim template labels = %v", l)
	}
	d := cases["deployment"].obj
	if l, _, _ := unstructured.NestedStringMap(d, "metadata", "labels"); l["keep"] != "me" {
		t.Errorf("existing labels lost: %v", l)
	}
}

func TestBundleName(t *testing.T) {
	if got := BundleName("Sink_App", "123"); got != "sink-app-123" {
		t.Errorf("BundleName = %q", got)
	}
	long := BundleName(strings.Repeat("a", 42), "9223372036854775807")
	if len(long) > 63 || long != BundleName(strings.Repeat("a", 42), "9223372036854775807") {
		t.Errorf("long name %q (%d)", long, len(long))
	}
}

func TestClassify(t *testing.T) {
	ctx := context.Background()
	gr := schema.GroupResource{Resource: "deployments"}
	retry := []error{
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED},
		fmt.Errorf("wrapped: %w", syscall.ECONNREFUSED),
		apierrors.NewServiceUnavailable("overloaded"),
		apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewTimeoutError("timeout", 1),
		apierrors.NewInternalError(errors.New("boom")),
	}
	for _, err := range retry {
		if got := classify(ctx, err); got != appcontext.RsyncRetrying {
			t.Errorf("classify(%v) = %s, want Retrying", err, got)
		}
	}
	fail := []error{
		apierrors.NewInvalid(schema.GroupKind{Kind: "Deployment"}, "web", nil),
		apierrors.NewForbidden(gr, "web", errors.New("no")),
		apierrors.NewBadRequest("bad"),
	}
	for _, err := range fail {
		if got := classify(ctx, err); got != appcontext.RsyncFailed {
			t.Errorf("classify(%v) = %s, want Failed", err, got)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if got := classify(cancelled, errors.New("anything")); got != appcontext.RsyncRetrying {
		t.Errorf("an error after cancel must not be final: %s", got)
	}
}

func TestOrderForApply(t *testing.T) {
	r := func(group, kind string) appcontext.Resource {
		return appcontext.Resource{GVK: schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind}, Name: kind}
	}
	got := orderForApply([]appcontext.Resource{r("apps", "Deployment"), r("", "Namespace"), r("", "ConfigMap"), r("apiextensions.k8s.io", "CustomResourceDefinition")})
	var kinds []string
	for _, x := range got {
		kinds = append(kinds, x.GVK.Kind)
	}
	if strings.Join(kinds, ",") != "CustomResourceDefinition,Namespace,Deployment,ConfigMap" {
		t.Fatalf("order = %v", kinds)
	}
}
