package rsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

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

// TestClassify: every error class, from the errors API servers and the
// network really produce.
func TestClassify(t *testing.T) {
	ctx := context.Background()
	gr := schema.GroupResource{Resource: "deployments"}
	terminating := apierrors.NewForbidden(gr, "web", errors.New("namespace x is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	schemaMismatch := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
		Message: "failed to create typed patch object: .spec.replicas: field not declared in schema"}}
	cases := map[class][]error{
		transient: {
			&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED},
			&url.Error{Op: "Patch", URL: "https://127.0.0.1:1", Err: errors.New("tls: handshake failure")},
			fmt.Errorf("wrapped: %w", syscall.ECONNRESET),
			context.DeadlineExceeded,
			apierrors.NewServiceUnavailable("overloaded"),
			apierrors.NewTooManyRequests("slow down", 1),
			apierrors.NewTimeoutError("timeout", 1),
			apierrors.NewServerTimeout(gr, "patch", 1),
			apierrors.NewInternalError(errors.New(`failed calling webhook "w": no endpoints available`)),
			apierrors.NewConflict(gr, "web", errors.New("the object has been modified")),
			schemaMismatch, // unless the schema check says otherwise
			errdefs.Unavailable(errors.New("timeout"), "the catalogue does not answer"),
			errors.New("an error nobody classified"),
		},
		waiting: {
			&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "example.com", Kind: "Widget"}},
			errNotServed{kind: "example.com/v1 Widget"},
			errNamespaceUnusable{ns: "x", cause: apierrors.NewForbidden(gr, "x", errors.New("no"))},
			terminating,
		},
		permanent: {
			apierrors.NewInvalid(schema.GroupKind{Kind: "Deployment"}, "web", nil),
			apierrors.NewForbidden(gr, "web", errors.New("no")),
			apierrors.NewBadRequest("bad"),
			apierrors.NewUnauthorized("who are you"),
			apierrors.NewMethodNotSupported(gr, "patch"),
			apierrors.NewRequestEntityTooLargeError("too big"),
			errdefs.Invalid("the kubeconfig names a refused address"),
			errdefs.NotFound("cluster cp+gone not found"),
		},
	}
	for want, errs := range cases {
		for _, err := range errs {
			if got := classify(ctx, err); got != want {
				t.Errorf("classify(%v) = %s, want %s", err, got.status(), want.status())
			}
		}
	}
	if got := classify(ctx, nil); got != done {
		t.Errorf("classify(nil) = %s", got.status())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if got := classify(cancelled, apierrors.NewBadRequest("anything")); got != transient {
		t.Errorf("an error after cancel must not be final: %s", got.status())
	}
	// Only a network failure reads "unreachable".
	if r := reason(transient, apierrors.NewServiceUnavailable("busy")); strings.Contains(r, "unreachable") {
		t.Errorf("a 503 reads %q", r)
	}
	if r := reason(transient, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}); !strings.HasPrefix(r, "cluster unreachable: ") {
		t.Errorf("a refused connection reads %q", r)
	}
	if !schemaCheckable(schemaMismatch) || schemaCheckable(apierrors.NewInternalError(errors.New("x"))) || schemaCheckable(errors.New("x")) {
		t.Error("schemaCheckable: only a 500 without a reason may be a schema mismatch")
	}
}

func TestWavesFollowHelmsInstallOrder(t *testing.T) {
	r := func(group, kind string) appcontext.Resource {
		return appcontext.Resource{GVK: schema.GroupVersionKind{Group: group, Version: "v1", Kind: kind}, Name: kind}
	}
	got := waves([]appcontext.Resource{r("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"), r("apps", "Deployment"),
		r("", "Namespace"), r("", "ConfigMap"), r("", "Service"), r("example.com", "Widget"), r("apiextensions.k8s.io", "CustomResourceDefinition"),
		r("", "ServiceAccount")})
	var desc []string
	for _, w := range got {
		var kinds []string
		for _, x := range w {
			kinds = append(kinds, x.GVK.Kind)
		}
		desc = append(desc, strings.Join(kinds, "+"))
	}
	if want := "CustomResourceDefinition | Namespace | ConfigMap+ServiceAccount | Deployment+Service+Widget | ValidatingWebhookConfiguration"; strings.Join(desc, " | ") != want {
		t.Fatalf("waves = %s, want %s", strings.Join(desc, " | "), want)
	}
}

func TestDeriveContextStatus(t *testing.T) {
	rec := &recorder{names: applyNames, current: map[string]resState{}}
	set := func(k, st, why string) { rec.current[k] = resState{status: st, reason: why, where: k} }
	set("a", appcontext.RsyncApplied, "")
	set("b", appcontext.RsyncApplied, "")
	if st := rec.deriveLocked(false); st.Status != appcontext.Instantiated || st.Error != "" || st.Active {
		t.Fatalf("all applied: %+v", st)
	}
	set("c", appcontext.RsyncWaiting, "kind example.com/v1 Widget is not served")
	st := rec.deriveLocked(false)
	if st.Status != appcontext.Instantiating || st.Error != "1 waiting" || len(st.Reasons) != 1 || !strings.Contains(st.Reasons[0], "Widget") {
		t.Fatalf("one waiting: %+v", st)
	}
	set("d", appcontext.RsyncFailed, "ConfigMap \"X\" is invalid")
	st = rec.deriveLocked(false)
	if st.Status != appcontext.InstantiateFailed || !st.Active || st.Error != "1 of 4 resources failed, 1 waiting" ||
		!strings.Contains(st.Reasons[0], "invalid") {
		t.Fatalf("failed while waiting: %+v", st)
	}
	set("c", appcontext.RsyncApplied, "")
	if st := rec.deriveLocked(true); st.Status != appcontext.InstantiateFailed || st.Active {
		t.Fatalf("failed at the end: %+v", st)
	}
	rec = &recorder{names: deleteNames, current: map[string]resState{"a": {status: appcontext.RsyncDeleted}}}
	if st := rec.deriveLocked(true); st.Status != appcontext.Terminated {
		t.Fatalf("deleted: %+v", st)
	}
}
