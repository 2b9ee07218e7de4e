package e2e

// Issue 23: logical-cloud identities — which users a cloud may have, what
// its certificate can do and for how long, and what is left of it once the
// cloud is terminated; a cloud's namespace is its own.

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/ownership"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// cloudCert reads the certificate of a cloud's kubeconfig and a client
// acting with it.
func cloudCert(t *testing.T, kc string) (*x509.Certificate, *kubernetes.Clientset) {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(cfg.CertData)
	if b == nil {
		t.Fatal("the kubeconfig holds no certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert, kubernetes.NewForConfigOrDie(cfg)
}

// may asks the cluster whether the client may do verb on resource in ns.
func may(t *testing.T, cs *kubernetes.Clientset, verb, resource, ns string) bool {
	t.Helper()
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{Verb: verb, Resource: resource, Namespace: ns}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review: %v", err)
	}
	return r.Status.Allowed
}

func standardCloud(ns, user string) map[string]any {
	return obj("", map[string]any{"namespace": ns, "user": map[string]any{"userName": user, "type": "certificate"}})
}

func named(name string, o map[string]any) map[string]any {
	o["metadata"] = map[string]any{"name": name}
	return o
}

// onboardCloud adds a standard cloud with every right in its namespace,
// referencing the given clusters.
func onboardCloud(o *orch, project, name, ns, user string, clusters ...string) {
	lcs := "/v2/projects/" + project + "/logical-clouds"
	o.must(201, "POST", lcs, named(name, standardCloud(ns, user)))
	o.must(201, "POST", lcs+"/"+name+"/user-permissions", obj("primary", map[string]any{"namespace": ns,
		"apiGroups": []any{"*"}, "resources": []any{"*"}, "verbs": []any{"*"}}))
	for _, c := range clusters {
		o.must(201, "POST", lcs+"/"+name+"/cluster-references", obj(c+"-ref", map[string]any{"clusterProvider": "cp", "cluster": c}))
	}
}

// A cloud's user is never one of the cluster's own identities nor another
// cloud's; its certificate is a client certificate for that user alone,
// short-lived, renewed by the cloud's owner, and once the cloud is
// terminated it authorizes nothing: the cloud's bindings are gone, and so
// is any other binding naming its user.
func TestLogicalCloudIdentity(t *testing.T) {
	sharedClusters(t)
	const ttl = 20 * time.Minute
	o := startOrchestrator(t, testenv.UniqueName("ident"), "/"+testenv.UniqueName("ident"), func(opts *orchestrator.Options) {
		opts.LogicalClouds = orchestrator.LogicalCloudOptions{CertTTL: ttl, RenewAfter: 3 * time.Second, ReservedUsers: []string{"oidc:"}}
	})
	ctx := t.Context()
	c := sim.Clusters[0]
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
	for _, p := range []string{"p1", "p2"} {
		o.must(201, "POST", "/v2/projects", meta(p))
	}
	ns, user := testenv.UniqueName("lcid"), testenv.UniqueName("alice")

	for _, u := range []string{"system:kube-controller-manager", "system:serviceaccount:kube-system:default", "oidc:alice"} {
		if code, body := o.call("POST", "/v2/projects/p1/logical-clouds", named("bad", standardCloud(ns, u))); code != 400 || !strings.Contains(body, "reserved") {
			t.Fatalf("user %s: %d %s, want 400", u, code, body)
		}
	}
	onboardCloud(o, "p1", "lc1", ns, user, c.Name)
	if code, body := o.call("POST", "/v2/projects/p2/logical-clouds", named("lc2", standardCloud(ns+"-b", user))); code != 409 {
		t.Fatalf("a second cloud naming the first one's user: %d %s, want 409", code, body)
	}
	o.must(201, "POST", "/v2/projects/p2/logical-clouds", named("lc2", standardCloud(ns+"-b", user+"-b")))
	if code, body := o.call("PUT", "/v2/projects/p2/logical-clouds/lc2", named("lc2", standardCloud(ns+"-b", user))); code != 409 {
		t.Fatalf("a cloud renamed to another cloud's user: %d %s, want 409", code, body)
	}
	o.must(200, "PUT", "/v2/projects/p2/logical-clouds/lc2", named("lc2", standardCloud(ns+"-c", user+"-b"))) // its own user still

	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/instantiate", nil)
	o.waitJSON("/v2/projects/p1/logical-clouds/lc1/status", "lc1 Instantiated", deployedStatusIs("Instantiated"))
	kcPath := "/v2/projects/p1/logical-clouds/lc1/cluster-references/" + c.Name + "-ref/kubeconfig"
	kc := o.must(200, "GET", kcPath, nil)
	cert, client := cloudCert(t, kc)
	left := time.Until(cert.NotAfter) // the signer backdates NotBefore by 5 minutes
	t.Logf("certificate of %s: CN %q, groups %v, usages %v, expires in %s", user, cert.Subject.CommonName, cert.Subject.Organization, cert.ExtKeyUsage, left.Round(time.Second))
	if cert.Subject.CommonName != user || len(cert.Subject.Organization) != 0 {
		t.Fatalf("subject %v: want CN %s and no groups", cert.Subject, user)
	}
	if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("extended key usages %v, want client auth only", cert.ExtKeyUsage)
	}
	if left > ttl {
		t.Fatalf("the certificate expires in %s, want at most the %s asked", left, ttl)
	}
	if !may(t, client, "list", "configmaps", ns) || may(t, client, "list", "configmaps", "default") {
		t.Fatal("the cloud's user should act in its namespace and nowhere else")
	}

	// The owner renews it (after 3 s here; two thirds into its life by default).
	start := time.Now()
	var renewed *x509.Certificate
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) { // polling with a deadline
		if n, _ := cloudCert(t, o.must(200, "GET", kcPath, nil)); n.SerialNumber.Cmp(cert.SerialNumber) != 0 {
			renewed = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the certificate was never renewed")
		}
	}
	t.Logf("renewed %s after the first was read (serial %s → %s, valid until %s)", time.Since(start).Round(100*time.Millisecond),
		cert.SerialNumber, renewed.SerialNumber, renewed.NotAfter.Format(time.RFC3339))

	// A binding made behind Argus's back for the cloud's user.
	extra := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("extra")},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}},
		RoleRef:  rbacv1.RoleRef{Kind: "ClusterRole", Name: "view", APIGroup: rbacv1.GroupName}}
	if _, err := c.Clientset().RbacV1().ClusterRoleBindings().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/terminate", nil)
	o.waitJSON("/v2/projects/p1/logical-clouds/lc1/status", "lc1 Terminated", deployedStatusIs("Terminated"))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) { // polling with a deadline
		_, err := c.Clientset().RbacV1().ClusterRoleBindings().Get(ctx, extra.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the binding naming the terminated cloud's user stayed: %v", err)
		}
	}
	for _, check := range [][3]string{{"list", "configmaps", ns}, {"get", "secrets", ns}, {"list", "configmaps", "default"}, {"create", "pods", ns}} {
		if may(t, client, check[0], check[1], check[2]) {
			t.Errorf("after terminate the cloud's certificate may still %s %s in %s", check[0], check[1], check[2])
		}
	}
	if code, _ := o.call("GET", kcPath, nil); code != 409 {
		t.Errorf("kubeconfig of a terminated cloud: %d, want 409", code)
	}
}

// A cloud never takes over a namespace it did not create: it fails saying
// so, nothing of it is applied there (no role, no binding), and its
// terminate leaves the namespace and its Secrets alone. A namespace the
// operator annotates for the cloud is handed over.
func TestLogicalCloudNamespaceNotTakenOver(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("lcns"), "/"+testenv.UniqueName("lcns"))
	ctx := t.Context()
	c := sim.Clusters[1]
	cs := c.Clientset()
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
	o.must(201, "POST", "/v2/projects", meta("p1"))

	ns := testenv.UniqueName("taken")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "precious"},
		StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := testenv.UniqueName("bob")
	onboardCloud(o, "p1", "lc1", ns, user, c.Name)
	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/instantiate", nil)
	id := o.digStateOf("lc:p1/lc1").ContextID
	o.waitContext(id, "the namespace refused", func(x *appcontext.Context) (bool, string) {
		p := x.Placements[0]
		st := p.StatusOf("Namespace/_/" + ns)
		return st.Status == appcontext.RsyncFailed && strings.Contains(st.Error, "not created by this deployment"), st.Status + " " + st.Error
	})
	x, err := o.contexts.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range x.Placements[0].Resources {
		if st := x.Placements[0].StatusOf(r.Key()); r.GVK.Kind != "Namespace" && st.Status == appcontext.RsyncApplied {
			t.Errorf("%s applied although the namespace was refused", r.Key())
		}
	}
	t.Logf("namespace: %s", x.Placements[0].StatusOf("Namespace/_/"+ns).Error)
	if rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{}); err != nil || len(rbs.Items) != 0 {
		t.Fatalf("role bindings in the foreign namespace: %v %v", rbs, err)
	}
	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/terminate", nil)
	o.waitContext(id, "terminated", func(x *appcontext.Context) (bool, string) {
		return x.Status.Status == appcontext.Terminated, x.Status.Status
	})
	n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || n.DeletionTimestamp != nil {
		t.Fatalf("the namespace the cloud did not create was deleted: %v %v", n.DeletionTimestamp, err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, "precious", metav1.GetOptions{}); err != nil {
		t.Fatalf("its Secret: %v", err)
	}

	// Handed over by the operator: the cloud uses it, and deletes it.
	n.Annotations = map[string]string{v1alpha1.AnnotationOwner: "lc:p1/lc1"}
	if _, err := cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/instantiate", nil)
	o.waitJSON("/v2/projects/p1/logical-clouds/lc1/status", "lc1 Instantiated in the handed-over namespace", deployedStatusIs("Instantiated"))
	o.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/terminate", nil)
	o.waitJSON("/v2/projects/p1/logical-clouds/lc1/status", "lc1 Terminated", deployedStatusIs("Terminated"))
	if n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.DeletionTimestamp == nil {
		t.Fatal("the handed-over namespace stayed after terminate")
	}
}

// digStateOf reads any lifecycle of the test's catalogue.
func (o *orch) digStateOf(group string) (st struct{ ContextID string }) {
	o.t.Helper()
	s, err := o.catalog.GetState(context.Background(), group)
	if err != nil {
		o.t.Fatal(err)
	}
	st.ContextID = s.ContextID
	return st
}

// certLog records, per replica, what the orchestrators log about logical
// cloud certificates.
type certLog struct {
	mu      sync.Mutex
	entries []certEntry
}

type certEntry struct {
	replica, cloud, msg string
	at                  time.Time
}

func (l *certLog) Levels() []logrus.Level { return logrus.AllLevels }

func (l *certLog) Fire(e *logrus.Entry) error {
	if !strings.Contains(e.Message, "logical cloud user certificate") {
		return nil
	}
	cloud, _ := e.Data["logicalCloud"].(string)
	replica, _ := e.Data["replica"].(string)
	l.mu.Lock()
	l.entries = append(l.entries, certEntry{replica: replica, cloud: cloud, msg: e.Message, at: time.Now()})
	l.mu.Unlock()
	return nil
}

// of lists what a replica logged about a cloud since a time.
func (l *certLog) of(replica, cloud string, since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.entries {
		if e.replica == replica && e.cloud == cloud && !e.at.Before(since) {
			out = append(out, e.msg)
		}
	}
	return out
}

// replicaNamed starts a replica on shared stores with its own logger.
func replicaNamed(t *testing.T, db, prefix, id string, log *certLog) *orch {
	return startOrchestrator(t, db, prefix, func(opts *orchestrator.Options) {
		opts.ReplicaID = id
		opts.LeaseTTL = 2 * time.Second
		opts.LogicalClouds = orchestrator.LogicalCloudOptions{RenewAfter: 2 * time.Second, IssueTimeout: 3 * time.Second}
		l := logrus.New()
		l.SetOutput(io.Discard)
		l.SetLevel(logrus.DebugLevel)
		l.AddHook(replicaField(id)) // first: the log hook reads its field
		l.AddHook(log)
		opts.Logger = l
	})
}

// replicaField tags every entry with the replica that logged it.
type replicaField string

func (replicaField) Levels() []logrus.Level { return logrus.AllLevels }

func (r replicaField) Fire(e *logrus.Entry) error {
	e.Data["replica"] = string(r)
	return nil
}

// winner returns a name (prefix plus a number) that rendezvous hashing
// gives item to among members and itself.
func winner(item, prefix string, members ...string) string {
	for i := 0; ; i++ {
		id := prefix + strconv.Itoa(i)
		if ownership.Pick(item, append(append([]string{}, members...), id)) == id {
			return id
		}
	}
}

// A cloud's certificates are issued and renewed by its owner alone,
// whichever replica took the request; a hand-over stops the old owner's
// work before the new owner's begins; and a terminate stops an issuance
// still waiting, so no late "not issued" is recorded on a terminated cloud.
func TestLogicalCloudCertificatesOnTheOwnerOnly(t *testing.T) {
	sharedClusters(t)
	db, prefix := testenv.UniqueName("lcha"), "/"+testenv.UniqueName("lcha")
	log := &certLog{}
	a := replicaNamed(t, db, prefix, "a", log)
	c := sim.Clusters[0]
	a.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	a.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
	a.must(201, "POST", "/v2/projects", meta("p1"))
	onboardCloud(a, "p1", "lc1", testenv.UniqueName("lcha"), testenv.UniqueName("carol"), c.Name)
	a.must(202, "POST", "/v2/projects/p1/logical-clouds/lc1/instantiate", nil)
	a.waitJSON("/v2/projects/p1/logical-clouds/lc1/status", "lc1 Instantiated", deployedStatusIs("Instantiated"))

	for deadline := time.Now().Add(60 * time.Second); !slices.Contains(log.of("a", "lc1", time.Time{}), "logical cloud user certificate renewed"); time.Sleep(100 * time.Millisecond) { // polling with a deadline
		if time.Now().After(deadline) {
			t.Fatal("a never renewed lc1's certificate")
		}
	}
	// b joins, and rendezvous hashing hands it lc1: a stops renewing.
	bID := winner("lc:p1/lc1", "b", "a")
	b := replicaNamed(t, db, prefix, bID, log)
	var moved time.Time
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) { // polling with a deadline
		if slices.ContainsFunc(b.replicas(), func(r api.Replica) bool { return r.ID == bID && slices.Contains(r.Groups, "lc:p1/lc1") }) {
			moved = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lc1 never moved to the new replica")
		}
	}
	for deadline := time.Now().Add(60 * time.Second); len(log.of(bID, "lc1", moved)) < 2; time.Sleep(100 * time.Millisecond) { // polling with a deadline
		if time.Now().After(deadline) {
			t.Fatalf("the new owner never renewed lc1's certificate: %v", log.of(bID, "lc1", moved))
		}
	}
	if late := log.of("a", "lc1", moved); len(late) > 0 {
		t.Fatalf("the old owner kept at lc1's certificate after the hand-over: %v", late)
	}
	t.Logf("lc1 handed from a to %s; %s renewed %d times since, a none", bID, bID, len(log.of(bID, "lc1", moved)))

	// A request through a, for a cloud b owns: only b issues.
	lc2 := cloudOf(bID, []string{"a", bID}, "lc")
	start := time.Now()
	onboardCloud(a, "p1", lc2, testenv.UniqueName("lcha"), testenv.UniqueName("dave"), c.Name)
	a.must(202, "POST", "/v2/projects/p1/logical-clouds/"+lc2+"/instantiate", nil)
	a.waitJSON("/v2/projects/p1/logical-clouds/"+lc2+"/status", lc2+" Instantiated", deployedStatusIs("Instantiated"))
	if got := log.of("a", lc2, start); len(got) > 0 {
		t.Fatalf("the replica that took the request worked on %s's certificate: %v", lc2, got)
	}

	// An issuance still waiting (the cluster does not answer) stops with
	// the terminate: nothing is recorded after it, even past the timeout.
	dead := strings.Replace(string(c.Kubeconfig), c.RESTConfig().Host, "https://127.0.0.1:1", 1)
	a.uploadOK("/v2/cluster-providers/cp/clusters", meta("dead"), []byte(dead))
	lc3 := cloudOf(bID, []string{"a", bID}, "dead")
	onboardCloud(a, "p1", lc3, testenv.UniqueName("lcha"), testenv.UniqueName("erin"), "dead")
	a.must(202, "POST", "/v2/projects/p1/logical-clouds/"+lc3+"/instantiate", nil)
	a.must(202, "POST", "/v2/projects/p1/logical-clouds/"+lc3+"/terminate", nil)
	terminated := time.Now()
	deadline := terminated.Add(8 * time.Second) // past the 3 s issue timeout
	for time.Now().Before(deadline) {
		refs := a.must(200, "GET", "/v2/projects/p1/logical-clouds/"+lc3+"/cluster-references/dead-ref", nil)
		if strings.Contains(refs, "not issued") || strings.Contains(refs, "no certificate issued") {
			t.Fatalf("a late failure was recorded on a terminated cloud: %s", refs)
		}
		time.Sleep(500 * time.Millisecond) // polling until the deadline
	}
	for _, r := range []string{"a", bID} {
		if got := log.of(r, lc3, terminated); slices.Contains(got, "logical cloud user certificate not issued") {
			t.Fatalf("%s recorded a failure after the terminate: %v", r, got)
		}
	}
}

// cloudOf names a cloud of project p1 (prefix plus a number) that
// rendezvous hashing gives to owner among members.
func cloudOf(owner string, members []string, prefix string) string {
	for i := 0; ; i++ {
		name := prefix + strconv.Itoa(i)
		if ownership.Pick("lc:p1/"+name, members) == owner {
			return name
		}
	}
}

func (o *orch) replicas() []api.Replica {
	o.t.Helper()
	var out struct{ Replicas []api.Replica }
	if err := json.Unmarshal([]byte(o.must(200, "GET", "/v2/system/replicas", nil)), &out); err != nil {
		o.t.Fatal(err)
	}
	return out.Replicas
}
