package tailbuf

import (
	"strings"
	"sync"
)

// Buffer is an io.Writer that keeps the first and the last max bytes
// written to it; it is safe for concurrent use.
type Buffer struct {
	mu         sync.Mutex
	max        int
	total      int
	head, last []byte
}

// New returns a Buffer keeping n bytes at each end.
func New(n int) *Buffer { return &Buffer{max: n} }

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += len(p)
	if room := b.max - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.last = append(b.last, p...)
	if len(b.last) > b.max {
		b.last = append(b.last[:0], b.last[len(b.last)-b.max:]...)
	}
	return len(p), nil
}

// String is what was written, trimmed: all of it when it fits in both
// ends, else its head and its tail with "…" between.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.whole())
}

func (b *Buffer) whole() string {
	switch after := b.total - len(b.head); {
	case after <= 0:
		return string(b.head)
	case after <= len(b.last):
		return string(b.head) + string(b.last[len(b.last)-after:])
	default:
		return string(b.head) + "\n…\n" + string(b.last)
	}
}

// Line is the line that says why the process stopped: the first line of
// the head that begins with one of prefixes, else the last line written
// that is not blank ("" when nothing was).
func (b *Buffer) Line(prefixes ...string) string {
	b.mu.Lock()
	head, last := string(b.head), string(b.last)
	b.mu.Unlock()
	for l := range strings.SplitSeq(head, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				return strings.TrimSpace(l)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(last), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
