package cluster

import (
	"fmt"
	"net/url"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// MaxKubeconfigBytes bounds a kubeconfig. Real ones are a few KiB; the
// bound keeps a YAML decoder from chewing on an upload-sized document.
const MaxKubeconfigBytes = 1 << 20

// KubeconfigOptions says what a kubeconfig may contain beyond inline data.
// The zero value is the strict default.
type KubeconfigOptions struct {
	// AllowProxy accepts clusters[].cluster.proxy-url. Off by default: a
	// proxy hides the real destination of every request to the cluster.
	AllowProxy bool
}

// fileFields name what makes client-go read a local file or run a command,
// with the reason given to the caller. Every other field of the v1 types
// is inline data (TestKubeconfigFieldsAreClassified keeps the two lists
// complete when client-go grows a field).
var (
	refusedClusterFields = map[string]string{
		"certificate-authority": "it names a local file; send the CA inline as certificate-authority-data",
	}
	refusedUserFields = map[string]string{
		"exec":               "credential plugins run a command on the orchestrator; use token or client-certificate-data/client-key-data",
		"auth-provider":      "auth providers run commands and write files; use token or client-certificate-data/client-key-data",
		"tokenFile":          "it names a local file; send the token inline as token",
		"client-certificate": "it names a local file; send the certificate inline as client-certificate-data",
		"client-key":         "it names a local file; send the key inline as client-key-data",
	}
)

// ParseKubeconfig decodes a kubeconfig and returns the REST config of its
// current context. It is the only way Argus turns kubeconfig bytes into a
// client: the document is decoded once, every cluster, user and context in
// it is checked (not only the current ones), and the config is built from
// the checked values alone — no KUBECONFIG merging, no home directory, no
// environment. Refusals are errdefs.ErrInvalid naming the field, e.g.
// "users[0].user.exec".
func ParseKubeconfig(data []byte, opts KubeconfigOptions) (*rest.Config, error) {
	if len(data) > MaxKubeconfigBytes {
		return nil, errdefs.Invalid("kubeconfig is %d bytes, more than the %d a kubeconfig may have", len(data), MaxKubeconfigBytes)
	}
	var v1 clientcmdv1.Config
	if err := yaml.Unmarshal(data, &v1); err != nil {
		return nil, errdefs.InvalidWrap(err, "kubeconfig is not valid")
	}
	if err := CheckKubeconfig(&v1, opts); err != nil {
		return nil, err
	}
	var cfg clientcmdapi.Config
	if err := clientcmdlatest.Scheme.Convert(&v1, &cfg, nil); err != nil {
		return nil, errdefs.InvalidWrap(err, "kubeconfig is not valid")
	}
	// No ConfigAccess: nothing is persisted and no loading rules (which
	// read $KUBECONFIG and ~/.kube) take part.
	rc, err := clientcmd.NewNonInteractiveClientConfig(cfg, cfg.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "kubeconfig is not valid")
	}
	// Belt and braces: the check refused what would set these.
	if rc.ExecProvider != nil || rc.AuthProvider != nil || rc.BearerTokenFile != "" ||
		rc.CAFile != "" || rc.CertFile != "" || rc.KeyFile != "" || (rc.Proxy != nil && !opts.AllowProxy) {
		return nil, errdefs.Invalid("kubeconfig: the client config refers to local files or commands")
	}
	return rc, nil
}

// CheckKubeconfig refuses every entry that would make client-go run a
// command or read a local file, and proxy-url unless allowed. It returns
// errdefs.ErrInvalid naming the first offending field.
func CheckKubeconfig(cfg *clientcmdv1.Config, opts KubeconfigOptions) error {
	for i, c := range cfg.Clusters {
		path := fmt.Sprintf("clusters[%d].cluster", i)
		if c.Cluster.CertificateAuthority != "" {
			return refused(path, "certificate-authority", refusedClusterFields)
		}
		if c.Cluster.ProxyURL != "" && !opts.AllowProxy {
			return errdefs.Invalid("kubeconfig: %s.proxy-url is not allowed: a proxy hides where requests go (the orchestrator's --kubeconfig-allow-proxy allows it)", path)
		}
		if s := c.Cluster.Server; s != "" && !serverURL(s) {
			return errdefs.Invalid("kubeconfig: %s.server %q is not an https or http URL with a host (nor a host:port)", path, s)
		}
	}
	for i, u := range cfg.AuthInfos {
		path := fmt.Sprintf("users[%d].user", i)
		a := u.AuthInfo
		switch {
		case a.Exec != nil:
			return refused(path, "exec", refusedUserFields)
		case a.AuthProvider != nil:
			return refused(path, "auth-provider", refusedUserFields)
		case a.TokenFile != "":
			return refused(path, "tokenFile", refusedUserFields)
		case a.ClientCertificate != "":
			return refused(path, "client-certificate", refusedUserFields)
		case a.ClientKey != "":
			return refused(path, "client-key", refusedUserFields)
		}
	}
	// Contexts only name clusters, users and a namespace: nothing in them
	// reaches a file. They are decoded, so a malformed one is refused above.
	return nil
}

// serverURL reports whether a cluster's server is an https or http URL
// with a host, or a bare host[:port], which client-go dials over https.
// Any other scheme (file://, unix://, a URL without a host) would have
// client-go dial something else than a cluster's API server, or fail
// only when first used.
func serverURL(s string) bool {
	if u, err := url.Parse(s); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
		return u.Host != "" && u.Opaque == ""
	}
	u, err := url.Parse("https://" + s)
	return err == nil && u.Host == s
}

func refused(path, field string, why map[string]string) error {
	return errdefs.Invalid("kubeconfig: %s.%s is not allowed: %s", path, field, why[field])
}
