package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Answers are bounded as bodies are. Every byte an answer holds while it
// is written to its client — the whole of an answer marshalled at once,
// or the buffer of one written as it is encoded (status answers) — is
// reserved from one budget (Options.MaxAnswerMemory) for as long as the
// client takes to read it; and each write must progress within
// AnswerWriteTimeout, so a client that does not read is cut off rather
// than hold its answer until the server's write timeout. Before, ten
// clients asking ?output=detail of a 60 MB status and never reading held
// 815 MiB.
const (
	// DefaultMaxAnswerMemory is the answer budget unless Options says.
	DefaultMaxAnswerMemory = 128 << 20
	// DefaultAnswerWriteTimeout bounds one write of an answer.
	DefaultAnswerWriteTimeout = 30 * time.Second
	// answerChunk is what a streamed answer buffers, and the most one
	// write sends: each has its own deadline, so a slow client that reads
	// makes progress where a stopped one is cut.
	answerChunk = 64 << 10
	// freeAnswer is what an answer may buffer without a reservation: the
	// connection cap times this is small.
	freeAnswer = 4 << 10
)

// answerWriter is the ResponseWriter every handler writes through (see
// observe): it buffers small writes, reserves what it holds from the
// answer budget, and gives each write to the connection a deadline.
// Watch streams, which have deadlines of their own, pass through.
type answerWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	ctx     context.Context
	budget  *semaphore.Weighted
	gauge   prometheus.Gauge
	max     int64
	wait    time.Duration
	stall   time.Duration
	cap     time.Time // the server's write timeout; zero for none
	through bool      // a watch stream: written as is
	narrow  string    // what narrows this answer, for a 413

	buf     []byte
	bufHeld bool  // answerChunk is reserved for buf
	preheld int64 // reserved by holdWhole for the next large write
	failed  error
}

func (s *server) newAnswerWriter(w http.ResponseWriter, r *http.Request) *answerWriter {
	// A request's context ends with its body's read error, when its error
	// still has to be answered: waits for the budget have their own bound.
	aw := &answerWriter{ResponseWriter: w, rc: http.NewResponseController(w), ctx: context.WithoutCancel(r.Context()), budget: s.answers, gauge: s.metrics.answerBytes,
		max: s.opts.MaxAnswerMemory, wait: s.opts.BodyWait, stall: s.opts.AnswerWriteTimeout}
	if s.opts.WriteTimeout > 0 {
		aw.cap = time.Now().Add(s.opts.WriteTimeout)
	}
	return aw
}

// Unwrap lets http.ResponseController reach the connection.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// answerWriterOf finds the answerWriter under w's wrappers.
func answerWriterOf(w http.ResponseWriter) *answerWriter {
	for w != nil {
		if a, ok := w.(*answerWriter); ok {
			return a
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// passThrough makes a watch stream's writes go out as they are.
func (a *answerWriter) passThrough() {
	_ = a.flush()
	a.through = true
}

func (a *answerWriter) Write(p []byte) (int, error) {
	switch {
	case a.through:
		return a.ResponseWriter.Write(p)
	case a.failed != nil:
		return 0, a.failed
	case len(a.buf)+len(p) <= answerChunk:
		// The first few KiB (most answers whole) are not worth a wait.
		if !a.bufHeld && len(a.buf)+len(p) > freeAnswer {
			if _, err := a.reserve(answerChunk); err != nil {
				return 0, err
			}
			a.bufHeld = true
		}
		a.buf = append(a.buf, p...)
		return len(p), nil
	}
	if err := a.flush(); err != nil {
		return 0, err
	}
	if len(p) <= answerChunk {
		return a.Write(p)
	}
	// A large write (an answer marshalled whole): held until sent.
	if a.preheld > 0 && int64(len(p)) <= a.preheld {
		a.preheld = 0 // holdWhole reserved it, and releases it
	} else {
		held, err := a.reserve(int64(len(p)))
		if err != nil {
			return 0, err
		}
		defer a.give(held)
	}
	if err := a.send(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// reserve takes n bytes from the budget (all of it, for more), waiting a
// little, and returns what it took; a client that cannot be answered
// within the budget is cut off.
func (a *answerWriter) reserve(n int64) (int64, error) {
	n = min(n, a.max)
	ctx, cancel := context.WithTimeout(a.ctx, a.wait)
	defer cancel()
	if err := a.take(ctx, n); err != nil {
		return 0, a.fail(errdefs.Unavailable(err, "the server is writing as many answers as its memory budget allows"))
	}
	return n, nil
}

func (a *answerWriter) take(ctx context.Context, n int64) error {
	if err := a.budget.Acquire(ctx, n); err != nil {
		return err
	}
	a.gauge.Add(float64(n))
	return nil
}

func (a *answerWriter) give(n int64) {
	a.budget.Release(n)
	a.gauge.Sub(float64(n))
}

// send writes p to the connection in chunks, each within the stall
// deadline.
func (a *answerWriter) send(p []byte) error {
	for len(p) > 0 {
		n := min(len(p), answerChunk)
		deadline := time.Now().Add(a.stall)
		if !a.cap.IsZero() && deadline.After(a.cap) {
			deadline = a.cap
		}
		_ = a.rc.SetWriteDeadline(deadline)
		if _, err := a.ResponseWriter.Write(p[:n]); err != nil {
			return a.fail(err)
		}
		if err := a.rc.Flush(); err != nil {
			return a.fail(err)
		}
		p = p[n:]
	}
	return nil
}

// fail records err and makes sure the client sees an incomplete answer,
// not a short complete one: the connection's next write fails.
func (a *answerWriter) fail(err error) error {
	if a.failed == nil {
		a.failed = err
		_ = a.rc.SetWriteDeadline(time.Unix(1, 0))
	}
	return err
}

func (a *answerWriter) flush() error {
	if len(a.buf) == 0 || a.failed != nil {
		return a.failed
	}
	err := a.send(a.buf)
	a.buf = a.buf[:0]
	return err
}

// Flush sends what is buffered.
func (a *answerWriter) Flush() {
	if a.through {
		_ = a.rc.Flush()
		return
	}
	_ = a.flush()
}

// finish sends what is buffered and gives the reservation back.
func (a *answerWriter) finish() {
	if !a.through {
		_ = a.flush()
	}
	if a.bufHeld {
		a.give(answerChunk)
		a.bufHeld = false
	}
	a.buf = nil
}

// narrowWith names, for a 413, what asks an answer for less.
func narrowWith(w http.ResponseWriter, how string) {
	if a := answerWriterOf(w); a != nil {
		a.narrow = how
	}
}

// streamer is an answer encoded as it is written (status.Response).
type streamer interface {
	WriteJSON(ctx context.Context, w io.Writer) error
}

// holdWhole reserves an answer marshalled whole before anything of it is
// written, so one that cannot be held is refused with a status: larger
// than the whole budget, 413 naming what narrows it; no room in time, 503.
func (a *answerWriter) holdWhole(size int) (release func(), err error) {
	n := int64(size)
	if n > a.max {
		narrow := a.narrow
		if narrow == "" {
			narrow = "a page of it (?limit=)"
		}
		return nil, errdefs.TooLarge("the answer is %d bytes, more than the server holds for answers (%d, --max-answer-memory); ask for less: %s", n, a.max, narrow)
	}
	if size <= answerChunk {
		return func() {}, nil // buffered, under the buffer's own reservation
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.wait)
	defer cancel()
	if err := a.take(ctx, n); err != nil {
		return nil, errdefs.Unavailable(err, "the server is writing as many answers as its memory budget allows (%d bytes); retry later", a.max)
	}
	a.preheld = n
	return func() {
		a.preheld = 0
		a.give(n)
	}, nil
}

// writeJSON answers with v as JSON: a status answer written as it is
// encoded, anything else marshalled whole and held under the answer
// budget while it is written.
func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error: the answer cannot be encoded", http.StatusInternalServerError)
		return
	}
	data = append(data, '\n')
	if a := answerWriterOf(w); a != nil {
		release, err := a.holdWhole(len(data))
		if err != nil {
			if statusFor(err) == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", strconv.Itoa(int(max(a.wait/time.Second, 1))))
			}
			http.Error(w, err.Error(), statusFor(err))
			return
		}
		defer release()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data) // the client went away; nothing useful to do
}

// writeStream answers with a status answer encoded as it is written. An
// error once the answer began (a manifest that cannot be read, a client
// that stopped reading) cuts the connection, so the client sees an
// incomplete answer, never a short one.
func writeStream(w http.ResponseWriter, r *http.Request, v streamer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	err := v.WriteJSON(r.Context(), w)
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	if err != nil {
		if a := answerWriterOf(w); a != nil {
			_ = a.fail(err)
		}
		loggerFrom(r.Context()).WithError(err).Info("answer not completed")
	}
}

// writeJSONList answers with a JSON array of what each emits, encoded as
// it is read (the v1 lists, which k8splugin never pages): what a request
// holds is one page of the catalogue and the answer's buffer, not the
// whole list. An error before the first item is answered as an error;
// after it, the connection is cut so the client sees an incomplete answer.
func writeJSONList(w http.ResponseWriter, r *http.Request, each func(emit func(any) error) error) error {
	started := false
	err := each(func(v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		sep := ","
		if !started {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			started, sep = true, "["
		}
		if _, err := io.WriteString(w, sep); err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	switch {
	case err != nil && !started:
		return err
	case err != nil:
		if a := answerWriterOf(w); a != nil {
			_ = a.fail(err)
		}
		loggerFrom(r.Context()).WithError(err).Info("answer not completed")
		return nil
	case !started:
		writeJSON(w, http.StatusOK, []any{})
		return nil
	}
	_, _ = io.WriteString(w, "]\n")
	return nil
}
