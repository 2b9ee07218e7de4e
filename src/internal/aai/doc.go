// Package aai mirrors v1 instances' resources into ONAP AAI (A&AI) as
// k8s-resource objects under each instance's cloud region and tenant, as
// k8splugin does.
//
// The Sink is one item of its own ownership kind ("sinks", item "aai"):
// the replica holding it runs one notify.Worker per instance, whose
// deliveries are PUTs and DELETEs to AAI instead of a callback POST, so
// what AAI holds (the delivered digests) and a change in flight (the
// frozen pending payload) live in etcd like a subscription's delivery
// state ("<prefix>/notify/aai/<instance id>") and survive restarts and
// handovers. It is told of changes by the context cache (Changed); a
// deleted instance (Forget, on whichever replica served the delete) is
// recorded under "<prefix>/aai-purges/<instance id>" for the holder, which
// removes the instance's objects from AAI and then the request.
//
//	sink, err := aai.New(aai.Options{Client: aai.ClientOptions{URL: "https://aai:8443/aai/v24", Tenants: tenants},
//		Catalog: cat, Feeds: reader, States: states, Etcd: cli, Claims: kind})
//	kind.Handle(sink)
//	cache.OnChange(sink.Changed)
//	go sink.Run(ctx)
package aai
