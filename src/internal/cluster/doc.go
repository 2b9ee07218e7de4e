// Package cluster turns a registered cluster's kubeconfig into clients, and
// caches them per cluster until its kubeconfig changes.
//
// A kubeconfig is data, never code: ParseKubeconfig refuses every entry
// that would make client-go run a command (exec, auth-provider) or read a
// local file (tokenFile, client-certificate, client-key,
// certificate-authority), and proxy-url unless allowed, naming the field.
// Uploads are checked with it, and so is every stored kubeconfig before a
// client is built from it.
//
//	cfg, err := cluster.ParseKubeconfig(upload, cluster.KubeconfigOptions{})
//	if errors.Is(err, errdefs.ErrInvalid) { ... } // 400, "users[0].user.exec is not allowed: ..."
package cluster
