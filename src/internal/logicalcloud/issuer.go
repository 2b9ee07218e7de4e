package logicalcloud

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
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
// certificate (base64 of the PEM), or why there is none.
type CertStore interface {
	SetCertificate(ctx context.Context, req Request, certificate, failure string) error
}

// Request asks for the certificate of one cloud's user on one cluster.
type Request struct {
	Project, Cloud string
	// Reference is the cluster reference's name.
	Reference string
	Cluster   appcontext.ClusterRef
	// CSRName is the CertificateSigningRequest rsync applies, CSR the PEM
	// request it must hold (so a foreign request of that name is refused).
	CSRName string
	CSR     []byte
}

func (r Request) cloudKey() string { return r.Project + "/" + r.Cloud }

// IssuerOptions configures an Issuer; Clients and Store are required.
type IssuerOptions struct {
	Clients Clients
	Store   CertStore
	// Timeout is how long a cluster may take to issue a certificate before
	// the cloud fails; 0 means 5m.
	Timeout time.Duration
	// BackoffBase and BackoffMax bound the retry delay while a cluster is
	// unreachable; 0 means 500ms and 15s.
	BackoffBase, BackoffMax time.Duration
	Logger                  *logrus.Entry
}

// Issuer gets standard clouds' user certificates signed: for each cluster
// it waits for the cloud's CertificateSigningRequest, approves it, waits
// for the cluster's signer to issue the certificate, and stores it. It owns
// one goroutine per (cloud, cluster) in progress; Close stops them.
type Issuer struct {
	opts   IssuerOptions
	log    *logrus.Entry
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]map[string]context.CancelFunc // cloud key → reference → cancel
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
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Issuer{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, running: map[string]map[string]context.CancelFunc{}}, nil
}

// Issue starts getting req's certificate, replacing a request in progress
// for the same cloud and reference.
func (i *Issuer) Issue(req Request) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.ctx.Err() != nil {
		return
	}
	refs := i.running[req.cloudKey()]
	if refs == nil {
		refs = map[string]context.CancelFunc{}
		i.running[req.cloudKey()] = refs
	}
	if cancel := refs[req.Reference]; cancel != nil {
		cancel()
	}
	ctx, cancel := context.WithCancel(i.ctx)
	refs[req.Reference] = cancel
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		defer cancel()
		i.run(ctx, req)
		i.mu.Lock()
		if refs := i.running[req.cloudKey()]; refs != nil && ctx.Err() == nil {
			delete(refs, req.Reference)
		}
		i.mu.Unlock()
	}()
}

// Cancel stops the requests in progress for a cloud (it is being
// terminated).
func (i *Issuer) Cancel(project, cloud string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	key := project + "/" + cloud
	for _, cancel := range i.running[key] {
		cancel()
	}
	delete(i.running, key)
}

// Close stops every request and waits for them; unfinished ones are
// resumed by the next process.
func (i *Issuer) Close() {
	i.mu.Lock()
	i.cancel()
	i.mu.Unlock()
	i.wg.Wait()
}

func (i *Issuer) run(ctx context.Context, req Request) {
	log := i.log.WithFields(logrus.Fields{"project": req.Project, "logicalCloud": req.Cloud, "cluster": req.Cluster.String()})
	wctx, cancel := context.WithTimeout(ctx, i.opts.Timeout)
	defer cancel()
	var last error
	retry := backoff.Backoff{Base: i.opts.BackoffBase, Max: i.opts.BackoffMax, Jitter: 0.2}
	for attempt := 1; ; attempt++ {
		cert, final, err := i.once(wctx, req)
		if err == nil {
			i.store(ctx, req, base64.StdEncoding.EncodeToString(cert), "", log)
			log.Info("logical cloud user certificate issued")
			return
		}
		if ctx.Err() != nil {
			return // cancelled: the cloud is terminating, or the process stops
		}
		last = err
		if final {
			break
		}
		if wctx.Err() != nil {
			last = fmt.Errorf("no certificate issued within %s (is the cluster's signer configured?): %w", i.opts.Timeout, err)
			break
		}
		log.WithError(err).WithField("attempt", attempt).Info("waiting to issue the logical cloud user certificate")
		if !retry.Wait(wctx) && ctx.Err() != nil {
			return
		}
	}
	log.WithError(last).Warn("logical cloud user certificate not issued")
	i.store(ctx, req, "", last.Error(), log)
}

func (i *Issuer) store(ctx context.Context, req Request, cert, failure string, log *logrus.Entry) {
	if err := i.opts.Store.SetCertificate(context.WithoutCancel(ctx), req, cert, failure); err != nil {
		log.WithError(err).Error("cannot record the logical cloud user certificate")
	}
}

// errFinal marks an answer that retrying will not change.
type errFinal struct{ error }

// once waits for the request to exist, approves it and waits for the
// certificate. final reports an error retrying cannot fix.
func (i *Issuer) once(ctx context.Context, req Request) (cert []byte, final bool, err error) {
	c, err := i.opts.Clients.Client(ctx, req.Cluster)
	if err != nil {
		return nil, false, err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, true, err
	}
	lw := cache.NewListWatchFromClient(cs.CertificatesV1().RESTClient(), "certificatesigningrequests", "",
		fields.OneTermEqualSelector("metadata.name", req.CSRName))
	// Until rsync applied it and it needs approving, or is already issued.
	csr, err := until(ctx, lw, req, func(_ *certv1.CertificateSigningRequest, approved, issued bool) bool { return !approved || issued })
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
			return nil, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), fmt.Errorf("approve CertificateSigningRequest %s: %w", req.CSRName, err)
		}
		if csr, err = until(ctx, lw, req, func(_ *certv1.CertificateSigningRequest, _, issued bool) bool { return issued }); err != nil {
			var f errFinal
			return nil, errors.As(err, &f), err
		}
	}
	return csr.Status.Certificate, false, nil
}

// until watches the request until done says so; a denied or failed
// request, or one holding another request than ours, is a final error. It
// lists first and then watches from the list's version (no informer, so
// nothing is logged when ctx ends the watch).
func until(ctx context.Context, lw *cache.ListWatch, req Request, done func(csr *certv1.CertificateSigningRequest, approved, issued bool) bool) (*certv1.CertificateSigningRequest, error) {
	check := func(e watch.Event) (bool, error) {
		csr, ok := e.Object.(*certv1.CertificateSigningRequest)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		if !bytes.Equal(csr.Spec.Request, req.CSR) {
			return false, errFinal{fmt.Errorf("CertificateSigningRequest %s holds another request than the logical cloud's", req.CSRName)}
		}
		approved := false
		for _, cond := range csr.Status.Conditions {
			switch cond.Type {
			case certv1.CertificateDenied, certv1.CertificateFailed:
				return false, errFinal{fmt.Errorf("CertificateSigningRequest %s %s: %s %s", req.CSRName, cond.Type, cond.Reason, cond.Message)}
			case certv1.CertificateApproved:
				approved = true
			}
		}
		return done(csr, approved, len(csr.Status.Certificate) > 0), nil
	}
	obj, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list CertificateSigningRequest %s: %w", req.CSRName, err)
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
		return nil, fmt.Errorf("watch CertificateSigningRequest %s: %w", req.CSRName, err)
	}
	return ev.Object.(*certv1.CertificateSigningRequest), nil
}
