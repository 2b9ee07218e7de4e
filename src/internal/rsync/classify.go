package rsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// class is what an error means for the resource it happened to.
type class int

const (
	// done: no error.
	done class = iota
	// transient: the cluster cannot be reached, is overloaded or timed
	// out; retried with capped exponential backoff and jitter.
	transient
	// waiting: the cluster lacks something the object needs (its kind, its
	// namespace); retried as soon as the cluster's API changes.
	waiting
	// permanent: the API server refused the object; retried only when the
	// deployment is updated (or the cluster's API changes while rsync is
	// still at work on the deployment).
	permanent
)

// status is the rsync status a class shows as.
func (c class) status() string {
	switch c {
	case done:
		return appcontext.RsyncApplied
	case transient:
		return appcontext.RsyncRetrying
	case waiting:
		return appcontext.RsyncWaiting
	}
	return appcontext.RsyncFailed
}

// errNotServed is a kind the cluster does not serve: its CRD (or aggregated
// API) is not installed or not established yet.
type errNotServed struct{ kind string }

func (e errNotServed) Error() string {
	return "kind " + e.kind + " is not served by the cluster (is its CustomResourceDefinition installed?)"
}

// errNamespaceUnusable is a namespace the object cannot go into yet.
type errNamespaceUnusable struct {
	ns    string
	cause error
}

func (e errNamespaceUnusable) Error() string {
	return fmt.Sprintf("namespace %q cannot be used yet: %v", e.ns, e.cause)
}

func (e errNamespaceUnusable) Unwrap() error { return e.cause }

// classify says what an error from a cluster request means. Only the API
// status (code, reason, details), typed errors and network errors decide;
// never the message text.
func classify(ctx context.Context, err error) class {
	if err == nil {
		return done
	}
	if ctx.Err() != nil {
		return transient // cancelled: nothing final can be said
	}
	var notServed errNotServed
	var nsUnusable errNamespaceUnusable
	var owned errOwned
	if errors.As(err, &owned) {
		return permanent
	}
	switch {
	case errors.As(err, &notServed), meta.IsNoMatchError(err), errors.As(err, &nsUnusable),
		apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return waiting
	case unreachable(err):
		return transient
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		switch {
		case st.Reason == metav1.StatusReasonConflict, apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err),
			apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
			apierrors.IsUnexpectedServerError(err), st.Code >= 500:
			// A conflict resolves on the next attempt; 429 and 5xx are the
			// server's to recover from (a webhook whose service is not ready
			// yet answers 500 too).
			return transient
		}
		return permanent // 400, 401, 403, 404, 405, 410, 413, 422
	}
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		return transient
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrUnauthorized),
		errors.Is(err, errdefs.ErrUnprocessable), errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrTooLarge):
		// From our side: a refused kubeconfig, a cluster no longer
		// registered, a manifest that does not decode.
		return permanent
	}
	// Anything else (a store hiccup while reading the kubeconfig, an
	// unknown client error) is retried rather than declared final.
	return transient
}

// unreachable reports a network-level failure: the cluster really cannot
// be reached (refused, reset, timed out, no route, TLS failure).
func unreachable(err error) bool {
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// reason is what a resource's status says about err: the API server's own
// message for API errors, prefixed so a reader knows which class it is.
func reason(c class, err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if c == transient && unreachable(err) {
		msg = "cluster unreachable: " + msg
	}
	if len(msg) > maxReason {
		msg = msg[:maxReason] + "…"
	}
	return msg
}

// maxReason bounds a stored reason (a 422 can list hundreds of causes).
const maxReason = 2048
