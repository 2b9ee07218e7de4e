package logicalcloud

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
)

func std() catalog.LogicalCloudSpec {
	return catalog.LogicalCloudSpec{Namespace: "ns1", Level: "1", User: catalog.LogicalCloudUser{UserName: "user-1", Type: "certificate"},
		Labels: catalog.StringMap{"team.example.com/name": "blue"}}
}

func perm(name, ns string) catalog.Object[catalog.UserPermissionSpec] {
	return catalog.Object[catalog.UserPermissionSpec]{Metadata: catalog.Metadata{Name: name},
		Spec: catalog.UserPermissionSpec{Namespace: ns, APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		mod func(*catalog.LogicalCloudSpec)
		ok  bool
	}{
		"standard":                 {func(*catalog.LogicalCloudSpec) {}, true},
		"level defaults to 1":      {func(s *catalog.LogicalCloudSpec) { s.Level = "" }, true},
		"admin needs nothing":      {func(s *catalog.LogicalCloudSpec) { *s = catalog.LogicalCloudSpec{Level: "0"} }, true},
		"unknown level":            {func(s *catalog.LogicalCloudSpec) { s.Level = "2" }, false},
		"namespace not a DNS name": {func(s *catalog.LogicalCloudSpec) { s.Namespace = "NS_1" }, false},
		"no namespace":             {func(s *catalog.LogicalCloudSpec) { s.Namespace = "" }, false},
		"no user":                  {func(s *catalog.LogicalCloudSpec) { s.User.UserName = "" }, false},
		"token users":              {func(s *catalog.LogicalCloudSpec) { s.User.Type = "token" }, false},
		"system user":              {func(s *catalog.LogicalCloudSpec) { s.User.UserName = "system:kube-controller-manager" }, false},
		"system user, any case":    {func(s *catalog.LogicalCloudSpec) { s.User.UserName = "System:Node:n1" }, false},
		"service account":          {func(s *catalog.LogicalCloudSpec) { s.User.UserName = "system:serviceaccount:kube-system:default" }, false},
		"system in the middle":     {func(s *catalog.LogicalCloudSpec) { s.User.UserName = "team-system:a" }, true},
		"bad label":                {func(s *catalog.LogicalCloudSpec) { s.Labels = catalog.StringMap{"a b": "c"} }, false},
	}
	for name, c := range cases {
		s := std()
		c.mod(&s)
		err := Validate(&s)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok %v", name, err, c.ok)
		}
		if err == nil && s.Level == "" {
			t.Errorf("%s: level left empty", name)
		}
	}
}

func TestResources(t *testing.T) {
	sec, err := NewSecrets("user-1")
	if err != nil {
		t.Fatal(err)
	}
	if sec.CSRUser() != "user-1" {
		t.Fatalf("CSR for %q", sec.CSRUser())
	}
	quotas := []catalog.Object[catalog.ClusterQuotaSpec]{{Metadata: catalog.Metadata{Name: "q1"}, Spec: catalog.StringMap{"limits.cpu": "2", "pods": "10"}}}
	objs, err := Resources(Cloud{Name: "lc1", Spec: std(), Perms: []catalog.Object[catalog.UserPermissionSpec]{perm("p1", "ns1"), perm("p2", "")},
		Quotas: quotas, CSR: sec.CSR, CertTTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	want := "Namespace//ns1 CertificateSigningRequest//lc1-ns1-user-csr ResourceQuota/ns1/q1 Role/ns1/lc1-role0 ClusterRole//lc1-clusterRole1 " +
		"RoleBinding/ns1/lc1-roleBinding0 ClusterRoleBinding//lc1-clusterRoleBinding1"
	if strings.Join(got, " ") != want {
		t.Fatalf("objects:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if l := objs[0].GetLabels(); l["team.example.com/name"] != "blue" {
		t.Errorf("namespace labels %v", l)
	}
	req, _, _ := unstructured.NestedString(objs[1].Object, "spec", "request")
	if pem, _ := base64.StdEncoding.DecodeString(req); string(pem) != string(sec.CSR) {
		t.Error("the CSR does not carry the cloud's request")
	}
	// A client certificate and nothing more, for a short while.
	usages, _, _ := unstructured.NestedStringSlice(objs[1].Object, "spec", "usages")
	exp, _, _ := unstructured.NestedInt64(objs[1].Object, "spec", "expirationSeconds")
	if strings.Join(usages, ",") != "client auth" || exp != 7200 {
		t.Errorf("CSR usages %v, expirationSeconds %d; want [client auth] and 7200", usages, exp)
	}
	if csr, _ := x509.ParseCertificateRequest(mustPEM(t, sec.CSR)); len(csr.Subject.Organization) != 0 {
		t.Errorf("the request names groups %v: the signer would put the user in them", csr.Subject.Organization)
	}
	if hard, _, _ := unstructured.NestedStringMap(objs[2].Object, "spec", "hard"); hard["limits.cpu"] != "2" {
		t.Errorf("quota %v", hard)
	}
	subj, _, _ := unstructured.NestedSlice(objs[5].Object, "subjects")
	ref, _, _ := unstructured.NestedStringMap(objs[5].Object, "roleRef")
	if subj[0].(map[string]any)["name"] != "user-1" || ref["name"] != "lc1-role0" || ref["kind"] != "Role" {
		t.Errorf("binding %v %v", subj, ref)
	}
	if _, err := Resources(Cloud{Name: "lc1", Spec: std(), Perms: []catalog.Object[catalog.UserPermissionSpec]{perm("p2", "")}, CSR: sec.CSR}); err == nil {
		t.Error("a cloud without a permission for its namespace was rendered")
	}
	enc, _ := sec.Encode()
	if back, err := DecodeSecrets(enc); err != nil || string(back.Key) != string(sec.Key) {
		t.Errorf("secrets round trip: %v", err)
	}
}

func mustPEM(t *testing.T, data []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("no PEM block")
	}
	return b.Bytes
}

// Operators reserve more prefixes: the clusters' own admin names, an
// authenticator's prefix.
func TestCheckUserReserved(t *testing.T) {
	reserved := []string{"oidc:", "kubernetes-admin"}
	for name, ok := range map[string]bool{"oidc:alice": false, "OIDC:bob": false, "kubernetes-admin": false, "alice": true, "system:x": false} {
		if err := CheckUser(name, reserved); (err == nil) != ok {
			t.Errorf("CheckUser(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestKubeconfig(t *testing.T) {
	admin := []byte(`apiVersion: v1
kind: Config
clusters: [{name: c1, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: Y2E=}}]
users: [{name: admin, user: {token: secret-admin-token}}]
contexts: [{name: c1, context: {cluster: c1, user: admin}}]
current-context: c1
`)
	kc, err := Kubeconfig(admin, "lc1", "ns1", "user-1", []byte("CERT"), []byte("KEY"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(kc), "secret-admin-token") {
		t.Fatal("the admin token leaked into the cloud's kubeconfig")
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	cx := cfg.Contexts[cfg.CurrentContext]
	if cx.Namespace != "ns1" || cfg.Clusters[cx.Cluster].Server != "https://127.0.0.1:6443" || string(cfg.Clusters[cx.Cluster].CertificateAuthorityData) != "ca" ||
		string(cfg.AuthInfos[cx.AuthInfo].ClientCertificateData) != "CERT" {
		t.Fatalf("kubeconfig %s", kc)
	}
	fileCA := []byte(strings.Replace(string(admin), "certificate-authority-data: Y2E=", "certificate-authority: /etc/ca.crt", 1))
	if _, err := Kubeconfig(fileCA, "lc1", "ns1", "user-1", nil, nil); err == nil {
		t.Error("a CA given as a file path was accepted")
	}
}

func TestDeployedStatus(t *testing.T) {
	issued := catalog.ClusterReferenceSpec{ClusterProvider: "cp", Cluster: "c1", Certificate: "Y2VydA=="}
	pending := catalog.ClusterReferenceSpec{ClusterProvider: "cp", Cluster: "c2"}
	failed := catalog.ClusterReferenceSpec{ClusterProvider: "cp", Cluster: "c2", CertificateError: "denied"}
	admin := catalog.LogicalCloudSpec{Level: "0"}
	cases := []struct {
		ctx  string
		spec catalog.LogicalCloudSpec
		refs []catalog.ClusterReferenceSpec
		want string
	}{
		{appcontext.Instantiated, admin, []catalog.ClusterReferenceSpec{pending}, appcontext.Instantiated},
		{appcontext.Instantiated, std(), []catalog.ClusterReferenceSpec{issued}, appcontext.Instantiated},
		{appcontext.Instantiated, std(), []catalog.ClusterReferenceSpec{issued, pending}, appcontext.Instantiating},
		{appcontext.Instantiated, std(), []catalog.ClusterReferenceSpec{pending, failed}, appcontext.InstantiateFailed},
		{appcontext.Updated, std(), []catalog.ClusterReferenceSpec{pending}, appcontext.Updating},
		{appcontext.Instantiating, std(), []catalog.ClusterReferenceSpec{issued}, appcontext.Instantiating},
		{appcontext.Terminated, std(), []catalog.ClusterReferenceSpec{failed}, appcontext.Terminated},
	}
	for _, c := range cases {
		if got, why := DeployedStatus(c.ctx, c.spec, c.refs); got != c.want || (got != c.ctx && why == "") {
			t.Errorf("DeployedStatus(%s, level %s, %v) = %s (%q), want %s", c.ctx, c.spec.Level, c.refs, got, why, c.want)
		}
	}
}
