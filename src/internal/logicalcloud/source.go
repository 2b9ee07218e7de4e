package logicalcloud

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Source builds clouds' kubeconfigs from the catalogue: the cluster's
// admin kubeconfig, the cloud's user key and the certificate the cluster
// issued.
type Source struct {
	Catalog *catalog.Catalog
}

// ForCluster is the kubeconfig a cloud's resources are applied with on a
// cluster (a cluster.CloudKubeconfigSource): an admin cloud's is the
// cluster's own; a standard cloud's is its user's, once issued.
func (s Source) ForCluster(ctx context.Context, ref appcontext.ClusterRef, cloud cluster.Cloud) ([]byte, error) {
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.Catalog, catalog.LogicalClouds).Get(ctx, catalog.Key{cloud.Project, cloud.Name})
	if err != nil {
		return nil, err
	}
	if !Standard(lc.Spec) {
		return s.admin(ctx, ref)
	}
	refs, err := catalog.For[catalog.ClusterReferenceSpec](s.Catalog, catalog.ClusterReferences).List(ctx, catalog.Key{cloud.Project, cloud.Name})
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		if r.Spec.ClusterProvider == ref.Provider && r.Spec.Cluster == ref.Name {
			return s.build(ctx, cloud.Project, lc, r)
		}
	}
	return nil, errdefs.Invalid("logical cloud %s/%s has no reference to cluster %s", cloud.Project, cloud.Name, ref)
}

// ForReference is the kubeconfig of a standard cloud's user on the cluster
// a reference names (GET .../cluster-references/{ref}/kubeconfig).
func (s Source) ForReference(ctx context.Context, project, cloud, reference string) ([]byte, error) {
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.Catalog, catalog.LogicalClouds).Get(ctx, catalog.Key{project, cloud})
	if err != nil {
		return nil, err
	}
	r, err := catalog.For[catalog.ClusterReferenceSpec](s.Catalog, catalog.ClusterReferences).Get(ctx, catalog.Key{project, cloud, reference})
	if err != nil {
		return nil, err
	}
	if !Standard(lc.Spec) {
		return nil, errdefs.Invalid("logical cloud %q is an admin (level 0) cloud: it has no user of its own", cloud)
	}
	return s.build(ctx, project, lc, r)
}

func (s Source) admin(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error) {
	return catalog.For[catalog.Empty](s.Catalog, catalog.Clusters).GetContent(ctx, catalog.Key{ref.Provider, ref.Name})
}

func (s Source) build(ctx context.Context, project string, lc catalog.Object[catalog.LogicalCloudSpec], r catalog.Object[catalog.ClusterReferenceSpec]) ([]byte, error) {
	if r.Spec.Certificate == "" {
		why := "it has not been issued yet; is the logical cloud instantiated?"
		if r.Spec.CertificateError != "" {
			why = r.Spec.CertificateError
		}
		return nil, errdefs.Conflict("logical cloud %q has no certificate for cluster %s+%s: %s", lc.Metadata.Name, r.Spec.ClusterProvider, r.Spec.Cluster, why)
	}
	cert, err := base64.StdEncoding.DecodeString(r.Spec.Certificate)
	if err != nil {
		return nil, fmt.Errorf("certificate of logical cloud %q: %w", lc.Metadata.Name, err)
	}
	data, err := catalog.For[catalog.LogicalCloudSpec](s.Catalog, catalog.LogicalClouds).GetContent(ctx, catalog.Key{project, lc.Metadata.Name})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.Conflict("logical cloud %q has no user key", lc.Metadata.Name)
	}
	if err != nil {
		return nil, err
	}
	sec, err := DecodeSecrets(data)
	if err != nil {
		return nil, err
	}
	admin, err := s.admin(ctx, appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster})
	if err != nil {
		return nil, err
	}
	return Kubeconfig(admin, lc.Metadata.Name, lc.Spec.Namespace, lc.Spec.User.UserName, cert, sec.Key)
}
