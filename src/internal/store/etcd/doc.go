// Package etcd opens Argus's runtime-state store: a client for external etcd
// endpoints or, when none are configured, an embedded single-member etcd
// server (go.etcd.io/etcd/server/v3/embed) on loopback with its data under a
// directory, so a laptop or a test needs nothing installed.
//
//	st, err := etcd.Open(ctx, etcd.Options{DataDir: dir})
//	defer st.Close()
//	st.Client.Put(ctx, "k", "v")
package etcd
