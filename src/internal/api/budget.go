package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Bodies are held in memory while they are checked: every connection may
// send up to the upload limit, so without a budget the connection cap
// times 64 MiB is what callers could make the orchestrator hold. Each
// request reserves what it may hold — its Content-Length, or its limit
// when it does not say — before it reads; requests that do not fit wait a
// little, in order, then get 503 with Retry-After.
const (
	// DefaultMaxBodyMemory is the budget unless Options.MaxBodyMemory says.
	DefaultMaxBodyMemory = 256 << 20
	// DefaultBodyWait is how long a request waits for room in the budget.
	DefaultBodyWait = 10 * time.Second
)

// reserveBody reserves what reading r's body under limit may hold; release
// gives it back once the request is done with the bytes.
func (s *server) reserveBody(w http.ResponseWriter, r *http.Request, limit int64) (release func(), err error) {
	n := limit
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	n = min(max(n, 1), s.opts.MaxBodyMemory)
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.BodyWait)
	defer cancel()
	if err := s.bodies.Acquire(ctx, n); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(s.opts.BodyWait/time.Second, 1))))
		return nil, errdefs.Unavailable(err, "the server is reading as many request bodies as its memory budget allows (%d bytes); retry later", s.opts.MaxBodyMemory)
	}
	s.metrics.bodyBytes.Add(float64(n))
	return func() {
		s.bodies.Release(n)
		s.metrics.bodyBytes.Sub(float64(n))
	}, nil
}
