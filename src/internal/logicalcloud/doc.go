// Package logicalcloud holds what Argus does for EMCO's distributed cloud
// manager (dcm): the resources a standard (level 1) logical cloud puts on
// each cluster — its namespace, its user's CertificateSigningRequest,
// ResourceQuotas from cluster quotas, Roles and bindings from user
// permissions — the kubeconfig of that user, and the Issuer, which gets
// each cluster's signer to issue the user's certificate through the CSR API.
// An admin (level 0) cloud is the clusters as they are: nothing to render.
//
// The deploy package runs the lifecycle (instantiate, update, terminate)
// with rsync; this package renders and issues:
//
//	objs, err := logicalcloud.Resources("lc1", spec, perms, quotas, secrets.CSR)
//	issuer.Issue(logicalcloud.Request{Project: "p", Cloud: "lc1", Reference: "c1-ref", Cluster: ref,
//		CSRName: logicalcloud.CSRName("lc1", spec.Namespace), CSR: secrets.CSR})
package logicalcloud
