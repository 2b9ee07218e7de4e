package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Warnings reach the request that asked for them, deduplicated; requests
// that did not ask drop them (no log flood).
func TestWarningsFollowTheRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 - "unknown field \"spec.replicas\""`)
		w.Header().Add("Warning", `299 - "unknown field \"spec.replicas\""`)
		w.Header().Add("Warning", `299 - "apps/v1beta1 Deployment is deprecated"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, WarningHandlerWithContext: contextWarnings{}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
	ctx, w := WithWarnings(context.Background())
	if _, err := ri.Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{`unknown field "spec.replicas"`, "apps/v1beta1 Deployment is deprecated"}
	if got := w.List(); !reflect.DeepEqual(got, want) {
		t.Fatalf("warnings = %q, want %q", got, want)
	}
	if _, err := ri.Get(context.Background(), "x", metav1.GetOptions{}); err != nil { // nobody asked: dropped
		t.Fatal(err)
	}
	if got := w.List(); len(got) != 2 {
		t.Fatalf("another request's warnings leaked in: %q", got)
	}
}
