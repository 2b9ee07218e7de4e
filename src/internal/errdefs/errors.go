package errdefs

import (
	"errors"
	"fmt"
)

// The kinds. Check them with errors.Is; construct errors with the helpers below
// so that the message reads well on its own (it becomes the HTTP body).
var (
	ErrNotFound      = errors.New("not found")
	ErrConflict      = errors.New("conflict")
	ErrInvalid       = errors.New("invalid")
	ErrUnprocessable = errors.New("unprocessable")
	ErrTooLarge      = errors.New("too large")
	ErrUnauthorized  = errors.New("unauthorized")
	ErrForbidden     = errors.New("forbidden")
	ErrUnavailable   = errors.New("unavailable")
	ErrTimedOut      = errors.New("timed out")
	// ErrFailed is an operation that was carried out and failed where it
	// acted (a cluster refused what was applied); its message is the
	// caller's to read, unlike an unexpected internal error's.
	ErrFailed = errors.New("failed")
)

// kindError carries a human message and a kind; Unwrap exposes the kind (and
// the cause, if any) to errors.Is/As.
type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func newf(kind error, cause error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}

// NotFound reports that the named object does not exist.
func NotFound(format string, args ...any) error { return newf(ErrNotFound, nil, format, args...) }

// Conflict reports a state clash: a duplicate, a dependent object, a forbidden transition.
func Conflict(format string, args ...any) error { return newf(ErrConflict, nil, format, args...) }

// Invalid reports a request that decoded but breaks a rule.
func Invalid(format string, args ...any) error { return newf(ErrInvalid, nil, format, args...) }

// InvalidWrap is Invalid with the underlying reason kept as the cause.
func InvalidWrap(cause error, format string, args ...any) error {
	return newf(ErrInvalid, cause, format, args...)
}

// Unprocessable reports a body that could not be decoded at all.
func Unprocessable(cause error, format string, args ...any) error {
	return newf(ErrUnprocessable, cause, format, args...)
}

// TooLarge reports a body over its size limit.
func TooLarge(format string, args ...any) error { return newf(ErrTooLarge, nil, format, args...) }

// Unauthorized reports a request without valid credentials.
func Unauthorized(format string, args ...any) error {
	return newf(ErrUnauthorized, nil, format, args...)
}

// Forbidden reports credentials that are valid but may not do this.
func Forbidden(format string, args ...any) error { return newf(ErrForbidden, nil, format, args...) }

// Unavailable reports a dependency (a store, a cluster) that cannot be reached now.
func Unavailable(cause error, format string, args ...any) error {
	return newf(ErrUnavailable, cause, format, args...)
}

// Failed reports an operation that failed where it acted, with the reasons.
func Failed(format string, args ...any) error { return newf(ErrFailed, nil, format, args...) }

// TimedOut reports a request the client did not send in time (a body
// trickled slower than the server's read timeout allows).
func TimedOut(cause error, format string, args ...any) error {
	return newf(ErrTimedOut, cause, format, args...)
}
