package api

import (
	"context"
	"errors"
	"net/http"
	"syscall"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// statusFor is the one place where a domain error becomes an HTTP status.
func statusFor(err error) int {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrUnprocessable):
		return http.StatusUnprocessableEntity
	case errors.Is(err, errdefs.ErrTooLarge), errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errdefs.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errdefs.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, errdefs.ErrTimedOut):
		return http.StatusRequestTimeout
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, context.DeadlineExceeded),
		// Out of file descriptors: the process degrades, it does not fail.
		errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// writeError answers with err's status and, as EMCO does, a text body. The
// text of an unexpected error is logged, not returned: it may name
// internals. An ErrFailed (500, as k8splugin answers a create whose apply
// failed) says what failed.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusFor(err)
	msg := err.Error()
	if code == http.StatusInternalServerError && !errors.Is(err, errdefs.ErrFailed) {
		loggerFrom(r.Context()).WithError(err).Error("request failed")
		msg = "internal error; see the server log for request id " + requestID(r.Context())
	}
	http.Error(w, msg, code)
}
