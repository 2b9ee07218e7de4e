package logicalcloud

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Clients gives the issuer a cluster's own (admin) client.
type Clients interface {
	Client(ctx context.Context, ref appcontext.ClusterRef) (*cluster.Client, error)
}

// CertStore records what a cluster issued for a cloud's user: the
// certificate (PEM), or why there is none. It refuses (an error) once the
// cloud moved on from req.ContextID, and the request then ends.
type CertStore interface {
	SetCertificate(ctx context.Context, req Request, certificate []byte, failure string) error
}

// Request asks for the certificate of one cloud's user on one cluster, and
// for it to be kept valid: renewed before it expires, until cancelled.
type Request struct {
	Project, Cloud string
	// Reference is the cluster reference's name.
	Reference string
	Cluster   appcontext.ClusterRef
	// CSRName is the CertificateSigningRequest rsync applies, CSR the PEM
	// request it must hold (so a foreign request of that name is refused).
	CSRName string
	CSR     []byte
	// ContextID is the cloud's context the certificate is for.
	ContextID string
	// Certificate is the certificate issued before (PEM), renewed in
	// time; nil waits for the one rsync's request brings.
	Certificate []byte
	// TTL is the lifetime a renewal asks for.
	TTL time.Duration
}

func (r Request) cloudKey() string { return r.Project + "/" + r.Cloud }

// same reports whether two requests ask for the same thing, so a request
// in progress is kept.
func (r Request) same(o Request) bool {
	return r.ContextID == o.ContextID && r.CSRName == o.CSRName && r.Cluster == o.Cluster && bytes.Equal(r.CSR, o.CSR) && r.TTL == o.TTL
}

// IssuerOptions configures an Issuer; Clients and Store are required.
type IssuerOptions struct {
	Clients Clients
	Store   CertStore
	// Timeout is how long a cluster may take to issue the first
	// certificate before the cloud fails; 0 means 5m.
	Timeout time.Duration
	// BackoffBase and BackoffMax bound the retry delay while a cluster is
	// unreachable; 0 means 500ms and 15s.
	BackoffBase, BackoffMax time.Duration
	// RenewAfter is when a certificate is renewed, from its validity; nil
	// means two thirds into it.
	RenewAfter func(notBefore, notAfter time.Time) time.Time
	Logger     *logrus.Entry
}

// Issuer gets standard clouds' user certificates signed and keeps them
// valid: for each cluster it waits for the cloud's CertificateSigningRequest,
// approves it, waits for the cluster's signer to issue the certificate and
// stores it; before the certificate expires it asks for a new one with a
// request of its own, and stores that. It owns one goroutine per (cloud,
// cluster) in progress; Cancel and Close stop them and wait.
type Issuer struct {
	opts   IssuerOptions
	log    *logrus.Entry
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]map[string]*work // cloud key → reference → work
}

// work is one request in progress.
type work struct {
	req    Request
	cancel context.CancelFunc
	done   chan struct{}
}

// NewIssuer returns an Issuer.
func NewIssuer(opts IssuerOptions) (*Issuer, error) {
	if opts.Clients == nil || opts.Store == nil {
		return nil, errors.New("logicalcloud: Clients and Store are required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = 15 * time.Second
	}
	if opts.RenewAfter == nil {
		opts.RenewAfter = func(nb, na time.Time) time.Time { return nb.Add(na.Sub(nb) * 2 / 3) }
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Issuer{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, running: map[string]map[string]*work{}}, nil
}

// Issue starts getting req's certificate and keeping it valid. A request
// in progress for the same cloud and reference is kept when it asks for
// the same, and otherwise stopped first.
func (i *Issuer) Issue(req Request) {
	i.mu.Lock()
	old := i.running[req.cloudKey()][req.Reference]
	i.mu.Unlock()
	if old != nil {
		if old.req.same(req) {
			select {
			case <-old.done:
			default:
				return // still at work on the same thing
			}
		}
		old.cancel()
		<-old.done
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.ctx.Err() != nil {
		return
	}
	refs := i.running[req.cloudKey()]
	if refs == nil {
		refs = map[string]*work{}
		i.running[req.cloudKey()] = refs
	}
	if w := refs[req.Reference]; w != nil && w != old {
		return // another caller started one meanwhile
	}
	ctx, cancel := context.WithCancel(i.ctx)
	w := &work{req: req, cancel: cancel, done: make(chan struct{})}
	refs[req.Reference] = w
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		defer close(w.done)
		defer cancel()
		i.run(ctx, req)
	}()
}

// Retain stops the requests of a cloud for references not in keep (the
// cloud left those clusters), and waits for them.
func (i *Issuer) Retain(project, cloud string, keep map[string]bool) {
	i.stop(project+"/"+cloud, func(ref string) bool { return !keep[ref] })
}

// Cancel stops every request of a cloud (it is terminated, or another
// replica owns it now) and waits for them: once it returns, nothing more
// is stored for the cloud.
func (i *Issuer) Cancel(project, cloud string) {
	i.stop(project+"/"+cloud, func(string) bool { return true })
}

func (i *Issuer) stop(key string, which func(ref string) bool) {
	i.mu.Lock()
	var stopped []*work
	for ref, w := range i.running[key] {
		if which(ref) {
			w.cancel()
			stopped = append(stopped, w)
			delete(i.running[key], ref)
		}
	}
	if len(i.running[key]) == 0 {
		delete(i.running, key)
	}
	i.mu.Unlock()
	for _, w := range stopped {
		<-w.done
	}
}

// Close stops every request and waits for them; the next owner of each
// cloud resumes them.
func (i *Issuer) Close() {
	i.mu.Lock()
	i.cancel()
	i.mu.Unlock()
	i.wg.Wait()
}

// run gets the first certificate (unless req has one), then renews it in
// time, until ctx ends or the store refuses.
func (i *Issuer) run(ctx context.Context, req Request) {
	log := i.log.WithFields(logrus.Fields{"project": req.Project, "logicalCloud": req.Cloud, "cluster": req.Cluster.String()})
	cert := req.Certificate
	if cert == nil {
		c, err := i.first(ctx, req, log)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.WithError(err).Warn("logical cloud user certificate not issued")
			i.store(ctx, req, nil, err.Error(), log)
			return
		}
		if !i.store(ctx, req, c, "", log) {
			return
		}
		log.Info("logical cloud user certificate issued")
		cert = c
	}
	for {
		nb, na, err := validity(cert)
		if err != nil {
			log.WithError(err).Warn("the stored certificate does not parse; asking for a new one")
			nb, na = time.Now(), time.Now()
		}
		if !backoff.Sleep(ctx, time.Until(i.opts.RenewAfter(nb, na))) {
			return
		}
		next, ok := i.renew(ctx, req, cert, na, log)
		if !ok || !i.store(ctx, req, next, "", log) {
			return
		}
		log.Info("logical cloud user certificate renewed")
		cert = next
	}
}

// store records a result unless the request was cancelled; false when it
// was, or the store refused (the cloud moved on).
func (i *Issuer) store(ctx context.Context, req Request, cert []byte, failure string, log *logrus.Entry) bool {
	if ctx.Err() != nil {
		return false
	}
	if err := i.opts.Store.SetCertificate(context.WithoutCancel(ctx), req, cert, failure); err != nil {
		log.WithError(err).Warn("logical cloud user certificate not recorded; its request ends")
		return false
	}
	return true
}

// first waits for the certificate rsync's request brings, retrying while
// the cluster cannot be reached, for at most Timeout.
func (i *Issuer) first(ctx context.Context, req Request, log *logrus.Entry) ([]byte, error) {
	wctx, cancel := context.WithTimeout(ctx, i.opts.Timeout)
	defer cancel()
	retry := i.retry()
	for attempt := 1; ; attempt++ {
		cert, final, err := i.once(wctx, req, req.CSRName)
		if err == nil || final || ctx.Err() != nil {
			return cert, err
		}
		if wctx.Err() != nil {
			return nil, fmt.Errorf("no certificate issued within %s (is the cluster's signer configured?): %w", i.opts.Timeout, err)
		}
		log.WithError(err).WithField("attempt", attempt).Info("waiting to issue the logical cloud user certificate")
		if !retry.Wait(wctx) && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// renew asks the cluster for a new certificate with a request of Argus's
// own (the one rsync applied is spent), retrying until it is issued or ctx
// ends; once the old one expired, that is recorded as the failure until
// the renewal succeeds. The request is deleted once answered.
func (i *Issuer) renew(ctx context.Context, req Request, old []byte, expires time.Time, log *logrus.Entry) ([]byte, bool) {
	sum := sha256.Sum256(old)
	name := req.CSRName + "-" + hex.EncodeToString(sum[:4])
	expired := false
	retry := i.retry()
	for attempt := 1; ; attempt++ {
		cert, err := i.renewOnce(ctx, req, name)
		if err == nil {
			return cert, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		log.WithError(err).WithField("attempt", attempt).Warn("cannot renew the logical cloud user certificate; retrying")
		if !expired && time.Now().After(expires) {
			expired = true
			if !i.store(ctx, req, nil, fmt.Sprintf("the certificate expired at %s and could not be renewed: %v", expires.UTC().Format(time.RFC3339), err), log) {
				return nil, false
			}
		}
		if !retry.Wait(ctx) {
			return nil, false
		}
	}
}

func (i *Issuer) renewOnce(ctx context.Context, req Request, name string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, i.opts.Timeout)
	defer cancel()
	c, err := i.opts.Clients.Client(rctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	csr := &certv1.CertificateSigningRequest{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(CSRObject(name, req.CSR, req.TTL).Object, csr); err != nil {
		return nil, err
	}
	if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(rctx, csr, metav1.CreateOptions{FieldManager: "argus"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create CertificateSigningRequest %s: %w", name, err)
	}
	cert, _, err := i.once(rctx, req, name)
	if err == nil {
		_ = cs.CertificatesV1().CertificateSigningRequests().Delete(rctx, name, metav1.DeleteOptions{})
	}
	return cert, err
}

// retry is the backoff between attempts while a cluster cannot be
// reached.
func (i *Issuer) retry() backoff.Backoff {
	return backoff.Backoff{Base: i.opts.BackoffBase, Max: i.opts.BackoffMax, Jitter: 0.2}
}

// validity reads a PEM certificate's validity.
func validity(cert []byte) (notBefore, notAfter time.Time, err error) {
	b, _ := pem.Decode(cert)
	if b == nil {
		return time.Time{}, time.Time{}, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return c.NotBefore, c.NotAfter, nil
}

// errFinal marks an answer that retrying will not change.
type errFinal struct{ error }

// once waits for the request named name to exist, approves it and waits
// for the certificate. final reports an error retrying cannot fix.
func (i *Issuer) once(ctx context.Context, req Request, name string) (cert []byte, final bool, err error) {
	c, err := i.opts.Clients.Client(ctx, req.Cluster)
	if err != nil {
		return nil, false, err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, true, err
	}
	lw := cache.NewListWatchFromClient(cs.CertificatesV1().RESTClient(), "certificatesigningrequests", "",
		fields.OneTermEqualSelector("metadata.name", name))
	// Until rsync applied it and it needs approving, or is already issued.
	csr, err := until(ctx, lw, req, name, func(_ *certv1.CertificateSigningRequest, approved, issued bool) bool { return !approved || issued })
	if err != nil {
		var f errFinal
		return nil, errors.As(err, &f), err
	}
	if len(csr.Status.Certificate) == 0 {
		csr = csr.DeepCopy()
		csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved,
			Status: corev1.ConditionTrue, Reason: "LogicalCloud", Message: "approved by Argus for logical cloud " + req.Project + "/" + req.Cloud,
			LastUpdateTime: metav1.Now()})
		_, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return nil, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), fmt.Errorf("approve CertificateSigningRequest %s: %w", name, err)
		}
		if csr, err = until(ctx, lw, req, name, func(_ *certv1.CertificateSigningRequest, _, issued bool) bool { return issued }); err != nil {
			var f errFinal
			return nil, errors.As(err, &f), err
		}
	}
	return csr.Status.Certificate, false, nil
}

// until watches the request until done says so; a denied or failed
// request, or one holding another request than ours or asking for more
// than client auth, is a final error. It lists first and then watches from
// the list's version (no informer, so nothing is logged when ctx ends the
// watch).
func until(ctx context.Context, lw *cache.ListWatch, req Request, name string, done func(csr *certv1.CertificateSigningRequest, approved, issued bool) bool) (*certv1.CertificateSigningRequest, error) {
	check := func(e watch.Event) (bool, error) {
		csr, ok := e.Object.(*certv1.CertificateSigningRequest)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		if !bytes.Equal(csr.Spec.Request, req.CSR) {
			return false, errFinal{fmt.Errorf("CertificateSigningRequest %s holds another request than the logical cloud's", name)}
		}
		if !clientOnly(csr.Spec) {
			return false, errFinal{fmt.Errorf("CertificateSigningRequest %s asks for more than a client certificate (signer %s, usages %v)", name, csr.Spec.SignerName, csr.Spec.Usages)}
		}
		approved := false
		for _, cond := range csr.Status.Conditions {
			switch cond.Type {
			case certv1.CertificateDenied, certv1.CertificateFailed:
				return false, errFinal{fmt.Errorf("CertificateSigningRequest %s %s: %s %s", name, cond.Type, cond.Reason, cond.Message)}
			case certv1.CertificateApproved:
				approved = true
			}
		}
		return done(csr, approved, len(csr.Status.Certificate) > 0), nil
	}
	obj, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list CertificateSigningRequest %s: %w", name, err)
	}
	list := obj.(*certv1.CertificateSigningRequestList)
	for i := range list.Items {
		ok, err := check(watch.Event{Type: watch.Added, Object: &list.Items[i]})
		if err != nil || ok {
			return &list.Items[i], err
		}
	}
	ev, err := watchtools.Until(ctx, list.ResourceVersion, lw, check)
	if err != nil {
		return nil, fmt.Errorf("watch CertificateSigningRequest %s: %w", name, err)
	}
	return ev.Object.(*certv1.CertificateSigningRequest), nil
}

// clientOnly reports a request for a client certificate and nothing more
// (the key usages older releases asked for beside client auth are
// allowed).
func clientOnly(spec certv1.CertificateSigningRequestSpec) bool {
	if spec.SignerName != certv1.KubeAPIServerClientSignerName || !slices.Contains(spec.Usages, certv1.UsageClientAuth) {
		return false
	}
	for _, u := range spec.Usages {
		if u != certv1.UsageClientAuth && u != certv1.UsageDigitalSignature && u != certv1.UsageKeyEncipherment {
			return false
		}
	}
	return true
}
