package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// kubeconfig renders a kubeconfig whose first user carries userExtra and
// whose first cluster carries clusterExtra (YAML lines, 4-space indented).
func kubeconfig(clusterExtra, userExtra string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: ` + "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==" + `
` + clusterExtra + `
users:
- name: u1
  user:
    token: t0ken
` + userExtra + `
contexts:
- name: ctx
  context: {cluster: c1, user: u1, namespace: default}
current-context: ctx
`
}

// touchExec is an exec plugin whose command would create marker.
func touchExec(marker string) string {
	return "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch " + marker + "\"]\n"
}

func TestParseKubeconfigAcceptsInlineData(t *testing.T) {
	cfg, err := ParseKubeconfig([]byte(kubeconfig("", "")), KubeconfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "t0ken" || len(cfg.CAData) == 0 {
		t.Fatalf("config = %+v", cfg)
	}
	// Client certificates and basic auth inline are data too.
	for _, inline := range []string{"    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n    as: someone\n", "    username: admin\n    password: secret\n"} {
		data := strings.Replace(kubeconfig("    tls-server-name: api.example\n", inline), "    token: t0ken\n", "", 1)
		if _, err := ParseKubeconfig([]byte(data), KubeconfigOptions{}); err != nil {
			t.Fatalf("%q: %v", inline, err)
		}
	}
}

func TestParseKubeconfigRefusesFilesAndCommands(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	for name, c := range map[string]struct {
		cluster, user string
		opts          KubeconfigOptions
		field         string
	}{
		"exec":                  {"", touchExec(marker), KubeconfigOptions{}, "users[0].user.exec"},
		"empty exec":            {"", "    exec: {}\n", KubeconfigOptions{}, "users[0].user.exec"},
		"auth-provider":         {"", "    auth-provider:\n      name: gcp\n      config: {cmd-path: /bin/sh}\n", KubeconfigOptions{}, "users[0].user.auth-provider"},
		"tokenFile":             {"", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n", KubeconfigOptions{}, "users[0].user.tokenFile"},
		"client-certificate":    {"", "    client-certificate: /etc/passwd\n", KubeconfigOptions{}, "users[0].user.client-certificate"},
		"client-key":            {"", "    client-key: /etc/shadow\n", KubeconfigOptions{}, "users[0].user.client-key"},
		"certificate-authority": {"    certificate-authority: /etc/hosts\n", "", KubeconfigOptions{}, "clusters[0].cluster.certificate-authority"},
		"proxy-url":             {"    proxy-url: http://10.0.0.1:3128\n", "", KubeconfigOptions{}, "clusters[0].cluster.proxy-url"},
		"server scheme":         {"    server: ftp://10.0.0.1/\n", "", KubeconfigOptions{}, "clusters[0].cluster.server"},
		"server file":           {"    server: file:///etc/kubernetes/admin.conf\n", "", KubeconfigOptions{}, "clusters[0].cluster.server"},
		"server unix":           {"    server: unix:///var/run/docker.sock\n", "", KubeconfigOptions{}, "clusters[0].cluster.server"},
		"server unix path":      {"    server: unix:/var/run/docker.sock\n", "", KubeconfigOptions{}, "clusters[0].cluster.server"},
		"server without host":   {"    server: https:///api\n", "", KubeconfigOptions{}, "clusters[0].cluster.server"},
	} {
		t.Run(name, func(t *testing.T) {
			data := kubeconfig(c.cluster, c.user)
			if c.cluster != "" && strings.Contains(c.cluster, "server:") {
				data = strings.Replace(data, "    server: https://127.0.0.1:6443\n", "", 1)
			}
			_, err := ParseKubeconfig([]byte(data), c.opts)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err = %v, want an invalid error naming %s", err, c.field)
			}
		})
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the exec plugin ran: %v", err)
	}
}

func TestParseKubeconfigChecksEveryEntry(t *testing.T) {
	// The second user is not the current context's, and still refused: a
	// later context switch must not be able to reach it.
	data := kubeconfig("", "") + `
`
	data = strings.Replace(data, "contexts:", "- name: u2\n  user:\n    exec: {command: /bin/true}\ncontexts:", 1)
	_, err := ParseKubeconfig([]byte(data), KubeconfigOptions{})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "users[1].user.exec") {
		t.Fatalf("err = %v, want users[1].user.exec named", err)
	}
}

// A bare host:port is what client-go dials over https: accepted, as
// before; so are http and https URLs with a path.
func TestParseKubeconfigServerForms(t *testing.T) {
	for _, server := range []string{"10.0.0.1:6443", "api.example:443", "https://api.example/prefix", "http://127.0.0.1:8080", "[::1]:6443"} {
		data := strings.Replace(kubeconfig("", ""), "server: https://127.0.0.1:6443", "server: "+strconv.Quote(server), 1)
		if _, err := ParseKubeconfig([]byte(data), KubeconfigOptions{}); err != nil {
			t.Errorf("server %s: %v", server, err)
		}
	}
}

func TestParseKubeconfigProxyWhenAllowed(t *testing.T) {
	cfg, err := ParseKubeconfig([]byte(kubeconfig("    proxy-url: http://10.0.0.1:3128\n", "")), KubeconfigOptions{AllowProxy: true})
	if err != nil || cfg.Proxy == nil {
		t.Fatalf("allowed proxy: %+v %v", cfg, err)
	}
}

func TestParseKubeconfigMalformed(t *testing.T) {
	for _, data := range []string{"", "{", "clusters: 7", strings.Repeat("a", MaxKubeconfigBytes+1),
		"apiVersion: v1\nkind: Config\ncurrent-context: nope\n"} {
		if _, err := ParseKubeconfig([]byte(data), KubeconfigOptions{}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%.40q: err = %v, want invalid", data, err)
		}
	}
}

// The config is built from the bytes alone: neither $KUBECONFIG nor the
// home directory's kubeconfig takes part, even when the upload names no
// current context.
func TestParseKubeconfigIgnoresTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	evil := kubeconfig("", touchExec(marker))
	for _, p := range []string{filepath.Join(dir, "env-kubeconfig"), filepath.Join(dir, ".kube", "config")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(evil), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("KUBECONFIG", filepath.Join(dir, "env-kubeconfig"))
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_MASTER", "https://10.0.0.1")
	for _, data := range []string{"", "apiVersion: v1\nkind: Config\n", kubeconfig("", "")} {
		cfg, err := ParseKubeconfig([]byte(data), KubeconfigOptions{})
		if err == nil && (cfg.ExecProvider != nil || cfg.Host != "https://127.0.0.1:6443") {
			t.Fatalf("%q: config taken from the environment: %+v", data, cfg)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a kubeconfig from the environment ran: %v", err)
	}
}

// A stored kubeconfig that fails the check makes the cluster unusable, and
// a client built before it changed is not used any more.
func TestRegistryRefusesAStoredKubeconfig(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	insecure := func(kc string) string {
		return strings.Replace(kc, "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n", "    insecure-skip-tls-verify: true\n", 1)
	}
	stored := insecure(kubeconfig("", ""))
	r := NewRegistry(Options{Kubeconfig: func(context.Context, appcontext.ClusterRef) ([]byte, error) { return []byte(stored), nil }})
	ref := appcontext.ClusterRef{Provider: "cp", Name: "c1"}
	if _, err := r.Client(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	stored = insecure(kubeconfig("", touchExec(marker)))
	_, err := r.Client(context.Background(), ref)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "cluster cp+c1: stored kubeconfig: users[0].user.exec is not allowed") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stored exec plugin ran: %v", err)
	}
}

// Every field of the kubeconfig types is either inline data or refused by
// name: a client-go upgrade that adds a field fails here until someone
// decides which it is.
func TestKubeconfigFieldsAreClassified(t *testing.T) {
	data := map[reflect.Type][]string{
		reflect.TypeFor[clientcmdv1.Cluster](): {"server", "tls-server-name", "insecure-skip-tls-verify", "certificate-authority-data",
			"proxy-url", "disable-compression", "extensions"},
		reflect.TypeFor[clientcmdv1.AuthInfo](): {"client-certificate-data", "client-key-data", "token", "as", "as-uid", "as-groups",
			"as-user-extra", "username", "password", "extensions"},
		reflect.TypeFor[clientcmdv1.Context](): {"cluster", "user", "namespace", "extensions"},
		reflect.TypeFor[clientcmdv1.Config](): {"kind", "apiVersion", "preferences", "clusters", "users", "contexts",
			"current-context", "extensions"},
	}
	refused := map[reflect.Type]map[string]string{
		reflect.TypeFor[clientcmdv1.Cluster]():  refusedClusterFields,
		reflect.TypeFor[clientcmdv1.AuthInfo](): refusedUserFields,
	}
	for typ, known := range data {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if _, ok := refused[typ][name]; ok || contains(known, name) {
				continue
			}
			t.Errorf("%s.%s is neither known inline data nor refused: classify it", typ.Name(), name)
		}
	}
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// FuzzKubeconfig: whatever the bytes, parsing never panics, and what it
// accepts runs no command and names no file.
func FuzzKubeconfig(f *testing.F) {
	f.Add([]byte(kubeconfig("", "")))
	f.Add([]byte(kubeconfig("", touchExec("/tmp/x"))))
	f.Add([]byte(kubeconfig("    proxy-url: socks5://h:1\n", "    tokenFile: /x\n")))
	f.Add([]byte(`{"apiVersion":"v1","users":[{"name":"u","user":{"Exec":{"command":"x"}}}],"clusters":[{"name":"c","cluster":{"server":"https://h"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`))
	f.Add([]byte("clusters: [{name: a, cluster: {server: 'h:1', extensions: [{name: e, extension: {kind: X}}]}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseKubeconfig(data, KubeconfigOptions{})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("non-invalid error: %v", err)
			}
			return
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" || cfg.CAFile != "" ||
			cfg.CertFile != "" || cfg.KeyFile != "" || cfg.Proxy != nil {
			t.Fatalf("accepted a config that runs or reads something: %+v", cfg)
		}
	})
}
