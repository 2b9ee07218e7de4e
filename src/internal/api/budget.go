package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Bodies are held in memory while they are checked: every connection may
// send up to the upload limit, so without a budget the connection cap
// times 64 MiB is what callers could make the orchestrator hold. Each
// request reserves what it may hold — its Content-Length, or its limit
// when it does not say — before it reads; requests that do not fit wait a
// little, then get 503 with Retry-After.
//
// The budget is shared fairly: an eighth of it is kept for small bodies
// (at most the JSON limit), so they pass beside large ones; each caller
// (a bearer token, or a remote address) may hold at most a share of each
// part, except that a caller holding nothing may always take one body;
// and a body must arrive at a minimum rate, so trickled uploads cannot
// hold their reservation for the whole read timeout.
const (
	// DefaultMaxBodyMemory is the budget unless Options.MaxBodyMemory says.
	DefaultMaxBodyMemory = 256 << 20
	// DefaultBodyWait is how long a request waits for room in the budget.
	DefaultBodyWait = 10 * time.Second
	// DefaultMinBodyRate is the slowest a body may arrive, on average,
	// once the grace has passed: bytes per second.
	DefaultMinBodyRate = 16 << 10
	// DefaultBodyRateGrace is how long a body may take before its rate
	// counts.
	DefaultBodyRateGrace = 10 * time.Second
	// smallPoolShare is the part of the budget kept for small bodies (1/8).
	smallPoolShare = 8
	// callerShare is the default part of each pool one caller may hold.
	callerShare = 4
)

// bodyBudget is the memory budget of request bodies: a general pool and a
// pool only small bodies may use, each with a per-caller share.
type bodyBudget struct {
	smallMax int64 // a body up to this is small

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) when bytes are released
	general pool
	small   pool
}

type pool struct {
	size, used, perCaller int64
	held                  map[string]int64
}

func newBodyBudget(total, perCaller, smallMax int64) *bodyBudget {
	small := max(total/smallPoolShare, min(2*smallMax, total/2))
	general := total - small
	if perCaller <= 0 {
		perCaller = general / callerShare
	}
	return &bodyBudget{smallMax: smallMax, changed: make(chan struct{}),
		general: pool{size: general, perCaller: perCaller, held: map[string]int64{}},
		small:   pool{size: small, perCaller: max(smallMax, small/callerShare), held: map[string]int64{}}}
}

// fits reports whether caller may take n more bytes of p; first lets a
// caller holding nothing take one body whatever its share.
func (p *pool) fits(caller string, n int64, first bool) bool {
	if p.used+n > p.size {
		return false
	}
	h := p.held[caller]
	return h+n <= p.perCaller || first && h == 0
}

func (p *pool) take(caller string, n int64) {
	p.used += n
	p.held[caller] += n
}

func (p *pool) give(caller string, n int64) {
	p.used -= n
	if p.held[caller] -= n; p.held[caller] <= 0 {
		delete(p.held, caller)
	}
}

// acquire reserves n bytes for caller, waiting until they fit or ctx
// ends; it returns the bytes reserved (n, or the general pool's size if n
// is larger) and what gives them back.
func (b *bodyBudget) acquire(ctx context.Context, caller string, n int64) (int64, func(), error) {
	n = max(min(n, b.general.size), 1)
	for {
		b.mu.Lock()
		var p *pool
		switch {
		case n <= b.smallMax && b.small.fits(caller, n, false):
			p = &b.small
		case b.general.fits(caller, n, true):
			p = &b.general
		}
		if p != nil {
			p.take(caller, n)
			b.mu.Unlock()
			return n, sync.OnceFunc(func() { b.release(p, caller, n) }), nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

func (b *bodyBudget) release(p *pool, caller string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p.give(caller, n)
	close(b.changed)
	b.changed = make(chan struct{})
}

// caller names who sends a request, for the budget's shares: its bearer
// token (hashed: never kept) when the API checks tokens, else its remote
// address. Behind a proxy every caller is the proxy.
func (s *server) caller(r *http.Request) string {
	if s.opts.Tokens != nil {
		if token, ok := bearerToken(r.Header.Get("Authorization")); ok {
			sum := sha256.Sum256([]byte(token))
			return "token:" + hex.EncodeToString(sum[:8])
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// reserveBody reserves what reading r's body under limit may hold, and
// makes r.Body arrive at the minimum rate; release gives the bytes back
// once the request is done with them.
func (s *server) reserveBody(w http.ResponseWriter, r *http.Request, limit int64) (release func(), err error) {
	n := limit
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.BodyWait)
	defer cancel()
	n, give, err := s.bodies.acquire(ctx, s.caller(r), n)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(s.opts.BodyWait/time.Second, 1))))
		return nil, errdefs.Unavailable(err, "the server is reading as many request bodies as its memory budget allows (%d bytes, a share of it per caller); retry later", s.opts.MaxBodyMemory)
	}
	s.metrics.bodyBytes.Add(float64(n))
	r.Body = s.paced(w, r)
	return func() {
		give()
		s.metrics.bodyBytes.Sub(float64(n))
	}, nil
}

// errBodyTooSlow is a body that arrived slower than the minimum rate.
var errBodyTooSlow = errors.New("the request body arrived too slowly")

// pacedBody cuts a body that arrives slower than rate bytes a second on
// average, once grace has passed: before each read, the connection's read
// deadline is set to when the bytes read so far, and one more, are due.
// The server's read timeout still bounds the whole request (cap).
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	cap   time.Time // zero: no read timeout
	got   int64
	slow  bool // the rate deadline, not the cap, is in force
}

func (s *server) paced(w http.ResponseWriter, r *http.Request) io.ReadCloser {
	if s.opts.MinBodyRate <= 0 {
		return r.Body
	}
	p := &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: s.opts.BodyRateGrace, rate: s.opts.MinBodyRate}
	if arrived, ok := r.Context().Value(keyArrived).(time.Time); ok && s.opts.ReadTimeout > 0 {
		p.cap = arrived.Add(s.opts.ReadTimeout)
	}
	return p
}

func (p *pacedBody) Read(b []byte) (int, error) {
	due := p.start.Add(p.grace + time.Duration(float64(p.got+1)/float64(p.rate)*float64(time.Second)))
	p.slow = p.cap.IsZero() || due.Before(p.cap)
	if !p.slow {
		due = p.cap
	}
	if err := p.rc.SetReadDeadline(due); err != nil {
		// Not supported here (a test's recorder): the read timeout alone.
		return p.ReadCloser.Read(b)
	}
	n, err := p.ReadCloser.Read(b)
	p.got += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		// The connection may serve another request: leave it the deadline
		// the server set (or none).
		_ = p.rc.SetReadDeadline(p.cap)
	case p.slow && errors.Is(err, os.ErrDeadlineExceeded):
		return n, errBodyTooSlow
	}
	return n, err
}
