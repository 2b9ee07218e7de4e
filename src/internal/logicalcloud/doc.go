// Package logicalcloud holds what Argus does for EMCO's distributed cloud
// manager (dcm): the resources a standard (level 1) logical cloud puts on
// each cluster — its namespace (the cloud's alone: never one that exists),
// its user's CertificateSigningRequest (client auth only, short-lived),
// ResourceQuotas from cluster quotas, Roles and bindings from user
// permissions — the kubeconfig of that user, which user names a cloud may
// have (never under system:, never another cloud's), and the Keeper, which
// on the replica owning the cloud has each cluster's signer issue the
// user's certificate through the CSR API (Issuer), renews it before it
// expires, and once the cloud is terminated forgets it and removes every
// binding that still names the user. An admin (level 0) cloud is the
// clusters as they are: nothing to render.
//
// The deploy package runs the lifecycle (instantiate, update, terminate)
// with rsync; this package renders, issues and revokes:
//
//	objs, err := logicalcloud.Resources(logicalcloud.Cloud{Project: "p", Name: "lc1", Spec: spec,
//		Perms: perms, Quotas: quotas, CSR: secrets.CSR, CertTTL: logicalcloud.DefaultCertTTL})
//	keeper, err := logicalcloud.NewKeeper(logicalcloud.KeeperOptions{Catalog: cat, Contexts: store.Get,
//		Clients: registry, Owns: groups.Owns})
//	go keeper.Run(ctx) // fed by keeper.Changed, Acquired and Released
package logicalcloud
