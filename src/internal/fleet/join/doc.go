// Package join registers pull clusters and gives their agents credentials
// of their own, so the orchestrator never holds a credential of a pull
// cluster.
//
// Registering a cluster in pull mode records it and returns a join token:
// single-use, expiring (TokenTTL), stored only as a hash. The agent
// exchanges the token, once, for its credential — a random bearer token
// bound to its cluster, of which the orchestrator too keeps only the hash —
// and authenticates with it from then on. Registering again (a new join
// token) and a new exchange replace the credential; deleting the cluster
// revokes it at once on every replica.
//
// Records live in etcd under <prefix>/fleet/:
//
//	clusters/<provider>+<cluster>   the cluster's record: its credential's hash, its current join token's id
//	tokens/<id>                     a join token: its cluster, its secret's hash, its expiry (on an etcd lease of TokenTTL)
//
// Every replica follows clusters/ with one watch and answers Authenticate
// and Pulls from memory.
//
//	svc, _ := join.New(join.Options{Client: cli, Prefix: "/argus"})
//	go svc.Run(ctx)
//	tok, _ := svc.Register(ctx, ref)      // tok.Token goes to the operator, once
//	cred, _ := svc.Exchange(ctx, tok.Token) // the agent's, once
//	ref, _, err := svc.Authenticate(cred.Credential)
package join
