package api

import (
	"errors"
	"net/http"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// ShowReason marks a readiness check's error as fit for anyone to read:
// /readyz, which answers without a token, prints its message after the
// check's name. Other errors may name internal addresses, so /readyz
// names only their check.
func ShowReason(err error) error {
	if err == nil {
		return nil
	}
	return shownReason{err}
}

type shownReason struct{ error }

func (e shownReason) Unwrap() error { return e.error }

// reasonOf is what /readyz prints for a failed check.
func reasonOf(name string, err error) string {
	var shown shownReason
	if errors.As(err, &shown) {
		return name + " (" + shown.Error() + ")"
	}
	return name
}

// readOnly answers every change (any method but GET, HEAD and OPTIONS)
// with 503 and Retry-After while Options.Writable says the stores cannot
// take writes — etcd out of space — so nothing is half written; reads go
// on.
func (s *server) readOnly(next http.Handler) http.Handler {
	if s.opts.Writable == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if err := s.opts.Writable(); err != nil {
				w.Header().Set("Retry-After", "30")
				writeError(w, r, errdefs.Unavailable(err, "the API serves reads only for now"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
