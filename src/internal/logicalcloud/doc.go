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
// Service runs a cloud's lifecycle (instantiate, update, terminate, stop)
// as deploy runs a DIG's: it records the cloud's resources as an
// AppContext (kind "lc", group "lc:<project>/<cloud>") that rsync applies
// with the clusters' own credentials (the namespace Exclusive: never taken
// over), and its Keeper, run on every replica and fed the contexts' changes
// and the groups acquired and released, has the certificates issued and
// renewed where the replica owns the cloud; the Service never issues. The
// API calls it for EMCO's dcm routes; deploy reads a cloud's state
// (ReadState) to place a DIG in it.
//
//	clouds, err := logicalcloud.NewService(logicalcloud.ServiceOptions{Catalog: cat, Contexts: contexts,
//		Rsync: dispatcher, Clients: clusters, Owns: groups.Owns, CertTTL: logicalcloud.DefaultCertTTL})
//	groups.Handle(clouds.Keeper()) // Acquired, Released; cache.OnChange(clouds.Keeper().Changed)
//	go clouds.Keeper().Run(ctx)
//	id, err := clouds.InstantiateCloud(ctx, catalog.Key{"p", "lc1"})
package logicalcloud
