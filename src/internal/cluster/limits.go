package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// A cluster's API server is untrusted: any API caller can register one that
// points at a server of their own. client-go reads a whole answer into
// memory before decoding it, and a watch event likewise, so without a bound
// one endless answer ends the orchestrator.
const (
	// DefaultMaxResponse bounds one answer that is not a watch. Kubernetes
	// objects are at most ~1.5 MiB and lists are paged, discovery and
	// OpenAPI documents are a few MiB even on clusters with many CRDs.
	DefaultMaxResponse = 64 << 20
	// MaxWatchEvent bounds one event of a watch stream (a line of JSON),
	// as client-go's own streaming decoder does for what it frames.
	MaxWatchEvent = 16 << 20
	// maxErrorBody is what is read of an error answer that is not a
	// Kubernetes Status, to tell what it was without showing it.
	maxErrorBody = 64 << 10
)

// ErrAnswerTooLarge marks an answer cut off at its bound (the error is
// also errdefs.ErrUnavailable).
var ErrAnswerTooLarge = errors.New("answer over its size bound")

type maxResponseKey struct{}

// WithMaxResponse lowers the bound on the answers to requests made with
// ctx (a query that returns what it reads to an API caller).
func WithMaxResponse(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, maxResponseKey{}, n)
}

// boundedTransport bounds what a cluster's answers may cost and keeps the
// bodies of answers that are not the API server's own (a foreign service a
// kubeconfig points at) out of errors, where client-go would quote them to
// the API caller that asked.
type boundedTransport struct {
	next        http.RoundTripper
	maxResponse int64
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	limit := t.maxResponse
	if n, ok := req.Context().Value(maxResponseKey{}).(int64); ok && n > 0 && n < limit {
		limit = n
	}
	watch, _ := strconv.ParseBool(req.URL.Query().Get("watch"))
	if !watch && resp.ContentLength > limit {
		_ = resp.Body.Close()
		return nil, tooLarge(req, limit)
	}
	body := &boundedBody{rc: resp.Body, req: req, max: limit, watch: watch}
	if watch {
		body.max = MaxWatchEvent
	}
	resp.Body = body
	if resp.StatusCode >= 400 && !kubernetesMedia(resp.Header.Get("Content-Type")) {
		return withoutForeignBody(resp)
	}
	return resp, nil
}

// kubernetesMedia reports the media types an API server answers errors in
// (a Status as JSON, YAML, protobuf or CBOR).
func kubernetesMedia(contentType string) bool {
	media, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch media {
	case "application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor":
		return true
	}
	return false
}

// withoutForeignBody replaces an error answer's body with a short text
// saying what it was: whatever an internal service answers must not reach
// API callers through an error message.
func withoutForeignBody(resp *http.Response) (*http.Response, error) {
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if media == "" {
		media = "no content type"
	}
	size := strconv.FormatInt(n, 10) + " bytes"
	if n == maxErrorBody {
		size = "more than " + size
	}
	text := fmt.Sprintf("not a Kubernetes API answer (%s, %s, not shown)", media, size)
	resp.Body = io.NopCloser(strings.NewReader(text))
	resp.ContentLength = int64(len(text))
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp.Header.Del("Content-Encoding")
	return resp, nil
}

// boundedBody fails a read once an answer passes max bytes (a watch: once
// one event does, counting from its last newline).
type boundedBody struct {
	rc    io.ReadCloser
	req   *http.Request
	max   int64
	watch bool
	n     int64 // bytes so far (a watch: since the last newline)
	err   error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if room := b.max - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	chunk := p[:n]
	if i := bytes.IndexByte(chunk, '\n'); b.watch && i >= 0 {
		// The event the newline ends, then what starts the next one.
		if b.n+int64(i) > b.max {
			b.n += int64(i)
		} else {
			b.n = int64(n - 1 - bytes.LastIndexByte(chunk, '\n'))
		}
	} else {
		b.n += int64(n)
	}
	if b.n > b.max {
		b.err = tooLarge(b.req, b.max)
		_ = b.rc.Close()
		return 0, b.err
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

func tooLarge(req *http.Request, limit int64) error {
	what := "answer"
	if w, _ := strconv.ParseBool(req.URL.Query().Get("watch")); w {
		what = "watch event"
	}
	return errdefs.Unavailable(ErrAnswerTooLarge, "the cluster's %s to %s %s is larger than %d bytes", what, req.Method, req.URL.Path, limit)
}
