package logicalcloud

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
)

// keeperOptions configures a Keeper; Catalog, Contexts, Clients and Owns
// are required.
type keeperOptions struct {
	Catalog  *catalog.Catalog
	Contexts ContextReader
	// Touch, when set, marks a context changed without changing it: a
	// cloud's deployed status follows its certificates, and its watchers
	// (emcoctl watch, subscriptions) learn of them through its context.
	Touch func(ctx context.Context, id string) error
	// Clients are the clusters' own clients: they approve requests and
	// remove the bindings a terminated cloud's user keeps.
	Clients Clients
	// Issuer tunes the issuance (timeouts, backoff, renewal); its Clients
	// and Store are the Keeper's.
	Issuer IssuerOptions
	// Owns reports whether this replica owns a group (a cloud is kept by
	// the owner of its "lc:<project>/<cloud>" group alone).
	Owns func(group string) bool
	// CertTTL is the lifetime asked for renewed certificates.
	CertTTL time.Duration
	Logger  *logrus.Entry
}

// Keeper does a standard cloud's certificate work on the replica that owns
// the cloud: while the cloud is instantiated it has every cluster issue
// its user's certificate and renew it before it expires (Issuer); once the
// cloud is terminated it stops that, forgets the certificates, and removes
// from every cluster the role bindings that still name the user, so a
// certificate that leaked grants nothing. Changed and Acquired only
// enqueue clouds; Released stops a cloud's issuance and waits, so the next
// owner never races this one. Its worker follows the sample-controller
// shape.
type Keeper struct {
	opts   keeperOptions
	log    *logrus.Entry
	issuer *Issuer

	// queue holds the clouds to sync, from newKeeper on: what is enqueued
	// before Run runs waits for it.
	queue workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	swept map[string]string // group → terminated context whose bindings are gone

	// syncMu is held by a sync and by Released, so no sync of a group
	// runs once Released stopped it; released are the groups given up
	// (until acquired again), cancelSync ends the sync in progress.
	syncMu     sync.Mutex
	released   map[string]bool
	cancelSync context.CancelFunc
}

// newKeeper returns a Keeper; Run starts it.
func newKeeper(opts keeperOptions) (*Keeper, error) {
	if opts.Catalog == nil || opts.Contexts == nil || opts.Clients == nil || opts.Owns == nil {
		return nil, errors.New("logicalcloud: Keeper needs Catalog, Contexts, Clients and Owns")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	k := &Keeper{opts: opts, log: opts.Logger, swept: map[string]string{}, released: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "logicalclouds"})}
	io := opts.Issuer
	io.Clients, io.Store = opts.Clients, k
	if io.Logger == nil {
		io.Logger = opts.Logger
	}
	var err error
	if k.issuer, err = NewIssuer(io); err != nil {
		return nil, err
	}
	return k, nil
}

// Changed is told the groups whose contexts changed; it never blocks.
func (k *Keeper) Changed(groups []string) {
	for _, g := range groups {
		if _, ok := cloudOf(g); ok && k.opts.Owns(g) {
			k.enqueue(g)
		}
	}
}

// Acquired is told a group this replica now owns.
func (k *Keeper) Acquired(group string) {
	if _, ok := cloudOf(group); !ok {
		return
	}
	k.syncMu.Lock()
	delete(k.released, group)
	k.syncMu.Unlock()
	k.enqueue(group)
}

// Released is told a group this replica gives up: a sync in progress
// ends, the cloud's issuance stops, and nothing more is stored for it,
// before the claim goes.
func (k *Keeper) Released(group string) {
	key, ok := cloudOf(group)
	if !ok {
		return
	}
	k.mu.Lock()
	if k.cancelSync != nil {
		k.cancelSync()
	}
	k.mu.Unlock()
	k.syncMu.Lock()
	defer k.syncMu.Unlock()
	k.released[group] = true
	k.issuer.Cancel(key[0], key[1])
}

func (k *Keeper) enqueue(group string) { k.queue.Add(group) }

// Run keeps clouds until ctx ends, then stops its worker and every
// issuance (Issuer.Close), and waits. It runs once.
func (k *Keeper) Run(ctx context.Context) error {
	q := k.queue
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k.next(ctx, q) {
		}
	}()
	<-ctx.Done()
	q.ShutDown()
	<-done
	k.issuer.Close()
	return nil
}

func (k *Keeper) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	group, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(group)
	k.syncMu.Lock()
	defer k.syncMu.Unlock()
	if k.released[group] || !k.opts.Owns(group) {
		q.Forget(group) // handed over: Released stopped it
		return true
	}
	sctx, cancel := context.WithTimeout(ctx, syncTimeout)
	k.mu.Lock()
	k.cancelSync = cancel
	k.mu.Unlock()
	err := k.sync(sctx, group)
	k.mu.Lock()
	k.cancelSync = nil
	k.mu.Unlock()
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			k.log.WithError(err).WithField("group", group).Warn("cannot keep the logical cloud's certificates; retrying")
			q.AddRateLimited(group)
		}
		return true
	}
	q.Forget(group)
	return true
}

// syncTimeout bounds one sync (a cluster that does not answer the sweep).
const syncTimeout = time.Minute

// cloudOf is the cloud a group names, when it is a logical cloud's.
func cloudOf(group string) (catalog.Key, bool) {
	g, ok := catalog.ParseGroup(group)
	return g.Key, ok && g.Kind == catalog.GroupLogicalCloud
}

// active reports a cloud whose user should hold certificates: instantiated
// or updated, its context not going away. A context that failed on some
// cluster keeps its certificates on the others.
func active(st State) bool {
	if st.Lifecycle.Current != catalog.StateInstantiated && st.Lifecycle.Current != catalog.StateUpdated {
		return false
	}
	switch st.ContextStatus {
	case "", appcontext.Terminating, appcontext.Terminated, appcontext.TerminateFailed:
		return false
	}
	return true
}

// sync brings one cloud's certificate work in line with its state.
func (k *Keeper) sync(ctx context.Context, group string) error {
	key, ok := cloudOf(group)
	if !ok {
		return nil
	}
	project, cloud := key[0], key[1]
	st, err := ReadState(ctx, k.opts.Catalog, k.opts.Contexts, key)
	if errors.Is(err, errdefs.ErrNotFound) {
		k.issuer.Cancel(project, cloud) // deleted: terminated before
		return nil
	}
	if err != nil {
		return err
	}
	if !Standard(st.Spec) {
		return nil
	}
	if active(st) {
		return k.issue(ctx, key, st)
	}
	k.issuer.Cancel(project, cloud)
	if st.Lifecycle.Current != catalog.StateTerminated {
		return nil // stopped or failed: the certificates stay until it is terminated
	}
	if err := ForgetCertificates(ctx, k.opts.Catalog, key, st.References); err != nil {
		return err
	}
	return k.sweep(ctx, group, st)
}

// issue has every cluster of the context issue the user's certificate, or
// keep renewing the one it issued; clusters the cloud left stop.
func (k *Keeper) issue(ctx context.Context, key catalog.Key, st State) error {
	data, err := catalog.For[catalog.LogicalCloudSpec](k.opts.Catalog, catalog.LogicalClouds).GetContent(ctx, key)
	if err != nil {
		return err
	}
	sec, err := DecodeSecrets(data)
	if err != nil {
		return err
	}
	placed := map[appcontext.ClusterRef]bool{}
	for _, p := range st.Context.Placements {
		placed[p.Cluster] = true
	}
	keep := map[string]bool{}
	for _, r := range st.References {
		ref := appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}
		if !placed[ref] || (r.Spec.CertificateError != "" && r.Spec.Certificate == "") {
			continue // never issued: failed until the cloud is instantiated again
		}
		var cert []byte
		if r.Spec.Certificate != "" {
			if cert, err = base64.StdEncoding.DecodeString(r.Spec.Certificate); err != nil {
				return fmt.Errorf("certificate of %s: %w", r.Metadata.Name, err)
			}
		}
		keep[r.Metadata.Name] = true
		k.issuer.Issue(Request{Project: key[0], Cloud: key[1], Reference: r.Metadata.Name, Cluster: ref,
			CSRName: CSRName(key[1], st.Spec.Namespace), CSR: sec.CSR, ContextID: st.Lifecycle.ContextID,
			Certificate: cert, TTL: k.opts.CertTTL})
	}
	k.issuer.Retain(key[0], key[1], keep)
	return nil
}

// ForgetCertificates clears what clusters issued for a cloud's references:
// a new instantiation issues anew, and a terminated cloud has none.
func ForgetCertificates(ctx context.Context, cat *catalog.Catalog, key catalog.Key, refs []catalog.Object[catalog.ClusterReferenceSpec]) error {
	res := catalog.For[catalog.ClusterReferenceSpec](cat, catalog.ClusterReferences)
	for _, r := range refs {
		if r.Spec.Certificate == "" && r.Spec.CertificateError == "" {
			continue
		}
		r.Spec.Certificate, r.Spec.CertificateError = "", ""
		if err := res.Replace(ctx, append(append(catalog.Key{}, key...), r.Metadata.Name), r); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}

// SetCertificate records what a cluster issued (the Issuer's CertStore),
// only while the cloud is still at the context the request is for: a
// result that arrives after a terminate, or a new instantiation, is
// refused.
func (k *Keeper) SetCertificate(ctx context.Context, req Request, cert []byte, failure string) error {
	key := catalog.Key{req.Project, req.Cloud}
	st, err := k.opts.Catalog.GetState(ctx, catalog.LogicalCloudGroup(req.Project, req.Cloud))
	if err != nil {
		return err
	}
	if st.ContextID != req.ContextID || (st.Current != catalog.StateInstantiated && st.Current != catalog.StateUpdated) {
		return errdefs.Conflict("logical cloud %s/%s is %s with context %s now, not the one the certificate is for", req.Project, req.Cloud, st.Current, st.ContextID)
	}
	res := catalog.For[catalog.ClusterReferenceSpec](k.opts.Catalog, catalog.ClusterReferences)
	rkey := append(key, req.Reference)
	r, err := res.Get(ctx, rkey)
	if err != nil {
		return err
	}
	// A failed renewal keeps the certificate it could not renew (expired:
	// it grants nothing), so the owner goes on renewing it.
	r.Spec.CertificateError = failure
	if cert != nil {
		r.Spec.Certificate = base64.StdEncoding.EncodeToString(cert)
	}
	if err := res.Replace(ctx, rkey, r); err != nil {
		return err
	}
	if k.opts.Touch == nil {
		return nil
	}
	return k.opts.Touch(ctx, st.ContextID)
}

var _ CertStore = (*Keeper)(nil)

// sweep removes, on every cluster of a terminated cloud's context, the
// role bindings that still name the cloud's user: those rsync applied are
// gone with the terminate already; any other (made by the user itself, or
// by hand) would keep granting its certificate rights until it expires.
// A binding naming others too only loses the user.
func (k *Keeper) sweep(ctx context.Context, group string, st State) error {
	if st.Context == nil || st.Spec.User.UserName == "" {
		return nil
	}
	k.mu.Lock()
	done := k.swept[group] == st.Context.Meta.ID
	k.mu.Unlock()
	if done {
		return nil
	}
	seen := map[appcontext.ClusterRef]bool{}
	for _, p := range st.Context.Placements {
		if seen[p.Cluster] {
			continue
		}
		seen[p.Cluster] = true
		n, err := k.unbind(ctx, p.Cluster, st.Spec.User.UserName)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", p.Cluster, err)
		}
		if n > 0 {
			k.log.WithFields(logrus.Fields{"group": group, "cluster": p.Cluster.String(), "bindings": n}).
				Warn("removed role bindings a terminated logical cloud's user still had")
		}
	}
	k.mu.Lock()
	k.swept[group] = st.Context.Meta.ID
	k.mu.Unlock()
	return nil
}

// unbind removes user from every RoleBinding and ClusterRoleBinding of a
// cluster; it returns how many it changed.
func (k *Keeper) unbind(ctx context.Context, ref appcontext.ClusterRef, user string) (int, error) {
	c, err := k.opts.Clients.Client(ctx, ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return 0, nil // the cluster is gone, and its bindings with it
	}
	if err != nil {
		return 0, err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return 0, err
	}
	rbs, err := cs.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	changed := 0
	for i := range rbs.Items {
		b := &rbs.Items[i]
		ok, err := rebind(b.Subjects, user, b.UID,
			func(opts metav1.DeleteOptions) error {
				return cs.RbacV1().RoleBindings(b.Namespace).Delete(ctx, b.Name, opts)
			},
			func(rest []rbacv1.Subject) error {
				b.Subjects = rest
				_, err := cs.RbacV1().RoleBindings(b.Namespace).Update(ctx, b, metav1.UpdateOptions{})
				return err
			})
		if err != nil {
			return changed, fmt.Errorf("RoleBinding %s/%s: %w", b.Namespace, b.Name, err)
		}
		if ok {
			changed++
		}
	}
	for i := range crbs.Items {
		b := &crbs.Items[i]
		ok, err := rebind(b.Subjects, user, b.UID,
			func(opts metav1.DeleteOptions) error {
				return cs.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, opts)
			},
			func(rest []rbacv1.Subject) error {
				b.Subjects = rest
				_, err := cs.RbacV1().ClusterRoleBindings().Update(ctx, b, metav1.UpdateOptions{})
				return err
			})
		if err != nil {
			return changed, fmt.Errorf("ClusterRoleBinding %s: %w", b.Name, err)
		}
		if ok {
			changed++
		}
	}
	return changed, nil
}

// rebind drops user from a binding's subjects: the binding goes when no
// one else is left, is updated otherwise (its resourceVersion guards the
// update; a conflict is retried with the next sync).
func rebind(subjects []rbacv1.Subject, user string, uid types.UID,
	del func(metav1.DeleteOptions) error, update func([]rbacv1.Subject) error) (bool, error) {
	var rest []rbacv1.Subject
	for _, s := range subjects {
		if s.Kind != rbacv1.UserKind || s.Name != user {
			rest = append(rest, s)
		}
	}
	if len(rest) == len(subjects) {
		return false, nil
	}
	var err error
	if len(rest) == 0 {
		err = del(metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	} else {
		err = update(rest)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
