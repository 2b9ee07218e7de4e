// Package logicalcloud holds what Argus does for EMCO's distributed cloud
// manager (dcm): the resources a standard (level 1) logical cloud puts on
// each cluster — its namespace, its user's CertificateSigningRequest,
// ResourceQuotas from cluster quotas, Roles and bindings from user
// permissions — the kubeconfig of that user, and the Issuer, which gets
// each cluster's signer to issue the user's certificate through the CSR API.
// An admin (level 0) cloud is the clusters as they are: nothing to render.
//
// Service runs a cloud's lifecycle (instantiate, update, terminate, stop)
// as deploy runs a DIG's: it records the cloud's resources as an
// AppContext (kind "lc", group "lc:<project>/<cloud>") that rsync applies
// with the clusters' own credentials, and its Issuer asks each cluster for
// the user's certificate, which the Service records on the cluster
// reference. The API calls it for EMCO's dcm routes; deploy reads a
// cloud's state (ReadState) to place a DIG in it.
//
//	clouds, err := logicalcloud.NewService(logicalcloud.ServiceOptions{Catalog: cat, Contexts: contexts, Rsync: dispatcher, Clients: clusters})
//	defer clouds.Close()
//	id, err := clouds.InstantiateCloud(ctx, catalog.Key{"p", "lc1"})
package logicalcloud
