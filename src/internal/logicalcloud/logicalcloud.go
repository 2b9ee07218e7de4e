package logicalcloud

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strconv"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// App is the pseudo-app under which a logical cloud's own resources are
// deployed and reported (EMCO's name).
const App = "logical-cloud"

// AdminNamespace is where an admin (level 0) cloud's DIGs deploy.
const AdminNamespace = "default"

// Standard reports whether spec is a standard (level 1) cloud: its own
// namespace and user on every cluster.
func Standard(spec catalog.LogicalCloudSpec) bool { return spec.Level != catalog.LevelAdmin }

// Namespace is where the cloud's DIGs deploy.
func Namespace(spec catalog.LogicalCloudSpec) string {
	if Standard(spec) {
		return spec.Namespace
	}
	return AdminNamespace
}

// Validate checks a cloud's spec when it is created or replaced; an empty
// level is level 1, as in EMCO.
func Validate(spec *catalog.LogicalCloudSpec) error {
	if spec.Level == "" {
		spec.Level = catalog.LevelStandard
	}
	switch spec.Level {
	case catalog.LevelAdmin:
		return nil
	case catalog.LevelStandard:
	default:
		return errdefs.Invalid("spec.level %q is not one of 0 (admin), 1 (standard)", spec.Level)
	}
	if errs := validation.IsDNS1123Label(spec.Namespace); len(errs) > 0 {
		return errdefs.Invalid("spec.namespace %q of a level-1 logical cloud is not a namespace name: %s", spec.Namespace, strings.Join(errs, "; "))
	}
	if spec.User.UserName == "" {
		return errdefs.Invalid("spec.user.userName is missing: a level-1 logical cloud needs a user")
	}
	if len(spec.User.UserName) > 64 || strings.ContainsAny(spec.User.UserName, "/\x00") {
		return errdefs.Invalid("spec.user.userName %q is not a usable user name", spec.User.UserName)
	}
	if err := CheckUser(spec.User.UserName, nil); err != nil {
		return err
	}
	if spec.User.Type != "" && !strings.EqualFold(spec.User.Type, "certificate") {
		return errdefs.Invalid("spec.user.type %q is not supported: only certificate", spec.User.Type)
	}
	for k, v := range spec.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return errdefs.Invalid("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return errdefs.Invalid("label %q value %q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	return nil
}

// ReservedPrefix is the user name prefix Kubernetes keeps for its own
// identities (system:kube-controller-manager, system:node:…,
// system:serviceaccount:…, system:anonymous); a cloud's certificate for
// such a name would act as them.
const ReservedPrefix = "system:"

// DefaultCertTTL is the lifetime asked for a cloud's user certificates.
const DefaultCertTTL = 8 * time.Hour

// CheckUser refuses a user name no cloud may have: one under Kubernetes'
// ReservedPrefix or under a prefix the operator reserves (the clusters'
// own admin names, an authenticator's prefix such as "oidc:"), compared
// without case.
func CheckUser(name string, reserved []string) error {
	lower := strings.ToLower(name)
	for _, p := range append([]string{ReservedPrefix}, reserved...) {
		if p != "" && strings.HasPrefix(lower, strings.ToLower(p)) {
			return errdefs.Invalid("spec.user.userName %q is reserved (prefix %q): a certificate for it would act as the clusters' own identities", name, p)
		}
	}
	return nil
}

// Secrets are a standard cloud's user key and certificate request, kept as
// the cloud's stored content (never answered by the API).
type Secrets struct {
	Key []byte `json:"key"` // PEM
	CSR []byte `json:"csr"` // PEM, for the user name it was made for
}

// NewSecrets makes the user's private key and a certificate request for
// userName. The request is made once and reused, so re-applying the
// CertificateSigningRequest (whose spec is immutable) never conflicts.
func NewSecrets(userName string) (Secrets, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Secrets{}, fmt.Errorf("generate the user key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return Secrets{}, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: userName}}, k)
	if err != nil {
		return Secrets{}, fmt.Errorf("create the certificate request: %w", err)
	}
	return Secrets{Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})}, nil
}

// CSRUser is the user name a request was made for.
func (s Secrets) CSRUser() string {
	b, _ := pem.Decode(s.CSR)
	if b == nil {
		return ""
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return ""
	}
	return req.Subject.CommonName
}

// Encode and DecodeSecrets convert Secrets to and from stored content.
func (s Secrets) Encode() ([]byte, error) { return json.Marshal(s) }

// DecodeSecrets reads stored Secrets.
func DecodeSecrets(data []byte) (Secrets, error) {
	var s Secrets
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("logical cloud secrets: %w", err)
	}
	return s, nil
}

// CSRName is the name of the cloud user's CertificateSigningRequest.
func CSRName(cloud, namespace string) string { return cloud + "-" + namespace + "-user-csr" }

// Cloud is what a standard cloud's resources are rendered from.
type Cloud struct {
	Name   string
	Spec   catalog.LogicalCloudSpec
	Perms  []catalog.Object[catalog.UserPermissionSpec]
	Quotas []catalog.Object[catalog.ClusterQuotaSpec]
	// CSR is the user's certificate request (PEM); CertTTL the lifetime
	// asked for its certificate (the CSR's expirationSeconds; clusters
	// never issue less than 10 minutes, and may cap it).
	CSR     []byte
	CertTTL time.Duration
}

// Resources renders what a standard cloud puts on each cluster, in apply
// order: its Namespace (Exclusive to the cloud: rsync creates it, with
// the cloud's group as its argus.io/owner), the user's
// CertificateSigningRequest (client auth only, for CertTTL), a
// ResourceQuota per cluster quota, and a Role (ClusterRole without a
// namespace) with its binding to the user per user permission. Names
// follow EMCO's.
func Resources(c Cloud) ([]*unstructured.Unstructured, error) {
	cloud, spec, perms, quotas := c.Name, c.Spec, c.Perms, c.Quotas
	ns := spec.Namespace
	primary := false
	for _, p := range perms {
		primary = primary || p.Spec.Namespace == ns
	}
	if !primary {
		return nil, errdefs.Invalid("logical cloud %q needs a user permission for its namespace %q", cloud, ns)
	}
	nsMeta := map[string]any{"name": ns}
	if len(spec.Labels) > 0 {
		labels := map[string]any{}
		for k, v := range spec.Labels {
			labels[k] = v
		}
		nsMeta["labels"] = labels
	}
	out := []*unstructured.Unstructured{
		object("v1", "Namespace", nsMeta, nil),
		CSRObject(CSRName(cloud, ns), c.CSR, c.CertTTL),
	}
	for _, q := range quotas {
		hard := map[string]any{}
		for k, v := range q.Spec {
			hard[k] = v
		}
		out = append(out, object("v1", "ResourceQuota", map[string]any{"name": q.Metadata.Name, "namespace": ns},
			map[string]any{"spec": map[string]any{"hard": hard}}))
	}
	var bindings []*unstructured.Unstructured
	for i, p := range perms {
		kind, binding, role, bname := "Role", "RoleBinding", cloud+"-role"+strconv.Itoa(i), cloud+"-roleBinding"+strconv.Itoa(i)
		meta := func(name string) map[string]any { return map[string]any{"name": name, "namespace": p.Spec.Namespace} }
		if p.Spec.Namespace == "" {
			kind, binding, role, bname = "ClusterRole", "ClusterRoleBinding", cloud+"-clusterRole"+strconv.Itoa(i), cloud+"-clusterRoleBinding"+strconv.Itoa(i)
			meta = func(name string) map[string]any { return map[string]any{"name": name} }
		}
		out = append(out, object("rbac.authorization.k8s.io/v1", kind, meta(role), map[string]any{"rules": []any{map[string]any{
			"apiGroups": strings2any(p.Spec.APIGroups), "resources": strings2any(p.Spec.Resources), "verbs": strings2any(p.Spec.Verbs)}}}))
		bindings = append(bindings, object("rbac.authorization.k8s.io/v1", binding, meta(bname), map[string]any{
			"subjects": []any{map[string]any{"kind": "User", "name": spec.User.UserName, "apiGroup": "rbac.authorization.k8s.io"}},
			"roleRef":  map[string]any{"kind": kind, "name": role, "apiGroup": "rbac.authorization.k8s.io"},
		}))
	}
	return append(out, bindings...), nil
}

// CSRObject is a CertificateSigningRequest of the user's request to the
// clusters' client signer: client auth only (the certificate cannot serve
// TLS nor sign), for ttl.
func CSRObject(name string, csrPEM []byte, ttl time.Duration) *unstructured.Unstructured {
	spec := map[string]any{
		"request":    base64.StdEncoding.EncodeToString(csrPEM),
		"signerName": certv1.KubeAPIServerClientSignerName,
		"usages":     []any{string(certv1.UsageClientAuth)},
	}
	if ttl > 0 {
		spec["expirationSeconds"] = int64(ttl / time.Second)
	}
	return object("certificates.k8s.io/v1", "CertificateSigningRequest", map[string]any{"name": name}, map[string]any{"spec": spec})
}

func object(apiVersion, kind string, meta map[string]any, rest map[string]any) *unstructured.Unstructured {
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	for k, v := range rest {
		o[k] = v
	}
	return &unstructured.Unstructured{Object: o}
}

func strings2any(ss []string) []any {
	out := make([]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}

// Kubeconfig is a standard cloud's kubeconfig for one cluster: the
// cluster's server and CA from its admin kubeconfig, the cloud's user with
// its issued certificate and key, and the cloud's namespace.
func Kubeconfig(admin []byte, cloud, namespace, user string, certPEM, keyPEM []byte) ([]byte, error) {
	cfg, err := clientcmd.Load(admin)
	if err != nil {
		return nil, errdefs.InvalidWrap(err, "the cluster's kubeconfig")
	}
	cctx := cfg.Contexts[cfg.CurrentContext]
	if cctx == nil {
		return nil, errdefs.Invalid("the cluster's kubeconfig has no current context")
	}
	cl := cfg.Clusters[cctx.Cluster]
	if cl == nil {
		return nil, errdefs.Invalid("the cluster's kubeconfig has no cluster %q", cctx.Cluster)
	}
	if cl.CertificateAuthority != "" && len(cl.CertificateAuthorityData) == 0 {
		// A path names a file on the host: never read what a caller names.
		return nil, errdefs.Invalid("the cluster's kubeconfig must embed certificate-authority-data")
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[cctx.Cluster] = &clientcmdapi.Cluster{Server: cl.Server, CertificateAuthorityData: cl.CertificateAuthorityData,
		TLSServerName: cl.TLSServerName, InsecureSkipTLSVerify: cl.InsecureSkipTLSVerify}
	out.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	out.Contexts[cloud] = &clientcmdapi.Context{Cluster: cctx.Cluster, AuthInfo: user, Namespace: namespace}
	out.CurrentContext = cloud
	return clientcmd.Write(*out)
}

// DeployedStatus is a cloud's deployedStatus: its context's status, except
// that a standard cloud is only Instantiated (or Updated) once every cluster
// of the context issued its user's certificate — until then Instantiating
// (Updating), and InstantiateFailed (UpdateFailed) if a cluster refused.
// refs are the cluster references the context places on. The second value
// says why, when not done.
func DeployedStatus(ctxStatus string, spec catalog.LogicalCloudSpec, refs []catalog.ClusterReferenceSpec) (string, string) {
	running, failed := appcontext.Instantiating, appcontext.InstantiateFailed
	switch {
	case !Standard(spec):
		return ctxStatus, ""
	case ctxStatus == appcontext.Updated:
		running, failed = appcontext.Updating, appcontext.UpdateFailed
	case ctxStatus != appcontext.Instantiated:
		return ctxStatus, ""
	}
	for _, r := range refs {
		if r.CertificateError != "" {
			return failed, fmt.Sprintf("cluster %s+%s: %s", r.ClusterProvider, r.Cluster, r.CertificateError)
		}
	}
	for _, r := range refs {
		if r.Certificate == "" {
			return running, fmt.Sprintf("waiting for cluster %s+%s to issue the user's certificate", r.ClusterProvider, r.Cluster)
		}
	}
	return ctxStatus, ""
}
