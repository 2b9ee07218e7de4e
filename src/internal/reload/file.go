package reload

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
)

// DefaultInterval is how often a File looks at its files when it is used.
const DefaultInterval = 2 * time.Second

// Options configures a File.
type Options[T any] struct {
	// Paths are the files the value is built from, read together.
	Paths []string
	// Parse builds the value from the files' contents, in Paths order. Its
	// errors must not quote the contents: they are logged.
	Parse func(contents [][]byte) (T, error)
	// Interval is the least time between two looks at the files; 0 means
	// DefaultInterval, a negative value means on every Get.
	Interval time.Duration
	// Logger reports a change that could not be loaded; nil discards.
	Logger *logrus.Entry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// File is a value built from files and rebuilt when their contents change.
// It has no goroutine: Get looks at the files, at most once per Interval, so
// an idle process does no work and nothing needs stopping.
type File[T any] struct {
	opts Options[T]
	cur  atomic.Pointer[T]

	mu      sync.Mutex // guards the fields below; held only by the caller that checks
	next    time.Time
	digest  [sha256.Size]byte
	lastErr string
}

// New reads and parses the files once; an error here is a configuration
// error worth refusing to start for.
func New[T any](opts Options[T]) (*File[T], error) {
	if len(opts.Paths) == 0 || opts.Parse == nil {
		return nil, errors.New("reload: Paths and Parse are required")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	f := &File[T]{opts: opts}
	contents, digest, err := f.read()
	if err != nil {
		return nil, err
	}
	v, err := opts.Parse(contents)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", f.names(), err)
	}
	f.cur.Store(&v)
	f.digest = digest
	f.next = opts.Now().Add(opts.Interval)
	return f, nil
}

// Get returns the current value, first rebuilding it if the files changed.
// When the new contents cannot be read or parsed, the last good value stays
// in force and the failure is logged once: a half-written file during a
// rotation must not take the service down.
func (f *File[T]) Get() T {
	f.refresh()
	return *f.cur.Load()
}

func (f *File[T]) refresh() {
	// One caller checks; the others go on with the current value rather
	// than queue behind a file read.
	if !f.mu.TryLock() {
		return
	}
	defer f.mu.Unlock()
	now := f.opts.Now()
	if f.opts.Interval > 0 && now.Before(f.next) {
		return
	}
	f.next = now.Add(f.opts.Interval)
	contents, digest, err := f.read()
	if err == nil && digest == f.digest {
		f.lastErr = ""
		return
	}
	var v T
	if err == nil {
		v, err = f.opts.Parse(contents)
	}
	if err != nil {
		if msg := err.Error(); msg != f.lastErr {
			f.lastErr = msg
			f.opts.Logger.WithError(err).WithField("files", f.names()).Warn("changed file not loaded; keeping the previous contents")
		}
		return
	}
	f.cur.Store(&v)
	f.digest, f.lastErr = digest, ""
	f.opts.Logger.WithField("files", f.names()).Info("reloaded changed file")
}

// read returns the files' contents and one digest over all of them. Contents
// are compared, not modification times: a copy that keeps the old mtime, or
// a Kubernetes secret volume's symlink swap, is still seen.
func (f *File[T]) read() ([][]byte, [sha256.Size]byte, error) {
	h := sha256.New()
	contents := make([][]byte, len(f.opts.Paths))
	for i, p := range f.opts.Paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, [sha256.Size]byte{}, fmt.Errorf("read %s: %w", p, err)
		}
		contents[i] = b
		// Length-prefixed, so moving bytes from one file to the next changes the digest.
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return contents, d, nil
}

func (f *File[T]) names() string {
	if len(f.opts.Paths) == 1 {
		return f.opts.Paths[0]
	}
	return fmt.Sprint(f.opts.Paths)
}
