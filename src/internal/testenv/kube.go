package testenv

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/argus-mc/argus/src/internal/simcluster"
)

// The manifest helpers live in simcluster, which the demo's dev tool shares;
// these keep the tests' spelling, with the tests' field manager.

// DecodeManifests splits multi-document YAML (or JSON) into objects.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	return simcluster.DecodeManifests(data)
}

// ApplyManifestFiles server-side applies every object in the files, in
// order, as kubectl apply --server-side would; with dryRun nothing is stored.
func ApplyManifestFiles(ctx context.Context, cfg *rest.Config, dryRun bool, paths ...string) ([]*unstructured.Unstructured, error) {
	return simcluster.ApplyFiles(ctx, cfg, applyOptions(dryRun), paths...)
}

// Apply server-side applies objects with field manager "argus-test".
func Apply(ctx context.Context, cfg *rest.Config, dryRun bool, objs ...*unstructured.Unstructured) error {
	return simcluster.Apply(ctx, cfg, applyOptions(dryRun), objs...)
}

func applyOptions(dryRun bool) simcluster.ApplyOptions {
	return simcluster.ApplyOptions{FieldManager: "argus-test", DryRun: dryRun}
}

// WaitEstablished waits until the named CRDs are Established and served.
func WaitEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	return simcluster.WaitEstablished(ctx, cfg, names...)
}
