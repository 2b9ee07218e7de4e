package cluster

import (
	"context"
	"sync"
)

// Warnings collects the warnings API servers send (HTTP Warning headers:
// unknown fields dropped, deprecated APIs) for the requests made with a
// context from WithWarnings.
type Warnings struct {
	mu   sync.Mutex
	list []string
}

// maxWarnings bounds what one request's warnings may cost to keep.
const maxWarnings = 20

type warningsKey struct{}

// WithWarnings returns a context whose requests' warnings are collected
// in the returned Warnings.
func WithWarnings(ctx context.Context) (context.Context, *Warnings) {
	w := &Warnings{}
	return context.WithValue(ctx, warningsKey{}, w), w
}

// List returns the warnings collected so far, without duplicates.
func (w *Warnings) List() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

func (w *Warnings) add(text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.list {
		if x == text {
			return
		}
	}
	if len(w.list) < maxWarnings {
		w.list = append(w.list, text)
	}
}

// contextWarnings hands each warning to the Warnings of the request's
// context, and drops it otherwise: client-go's default logs every one,
// which for a deprecated kind applied in a loop floods the log.
type contextWarnings struct{}

func (contextWarnings) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, text string) {
	if w, ok := ctx.Value(warningsKey{}).(*Warnings); ok && code == 299 && text != "" {
		w.add(text)
	}
}
