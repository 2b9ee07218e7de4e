package reload

import (
	"bytes"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func upper(c [][]byte) (string, error) {
	s := strings.TrimSpace(string(c[0]))
	if s == "" {
		return "", errors.New("empty")
	}
	return strings.ToUpper(s), nil
}

func newLogger() (*logrus.Entry, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	return logrus.NewEntry(l), &buf
}

func TestFileFollowsItsContents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v")
	testcert.WriteFile(t, path, []byte("one"))
	clk := &clock{now: time.Unix(1000, 0)}
	log, logs := newLogger()
	f, err := New(Options[string]{Paths: []string{path}, Parse: upper, Interval: 5 * time.Second, Now: clk.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != "ONE" {
		t.Fatalf("Get = %q", got)
	}

	testcert.WriteFile(t, path, []byte("two"))
	if got := f.Get(); got != "ONE" {
		t.Fatalf("looked again before the interval: %q", got)
	}
	clk.Add(5 * time.Second)
	if got := f.Get(); got != "TWO" {
		t.Fatalf("after the interval: %q", got)
	}

	// A change that does not parse keeps the last good value, logged once.
	testcert.WriteFile(t, path, []byte("  "))
	for range 3 {
		clk.Add(5 * time.Second)
		if got := f.Get(); got != "TWO" {
			t.Fatalf("a bad change replaced the value: %q", got)
		}
	}
	if n := strings.Count(logs.String(), "changed file not loaded"); n != 1 {
		t.Fatalf("bad change logged %d times, want once:\n%s", n, logs)
	}
	// So does a file that vanished for a moment.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Add(5 * time.Second)
	if got := f.Get(); got != "TWO" {
		t.Fatalf("a missing file replaced the value: %q", got)
	}
	testcert.WriteFile(t, path, []byte("three"))
	clk.Add(5 * time.Second)
	if got := f.Get(); got != "THREE" {
		t.Fatalf("after a good change: %q", got)
	}
}

// The same bytes in place, even under a new inode and mtime, are no change.
func TestUnchangedContentsAreNotParsedAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v")
	testcert.WriteFile(t, path, []byte("same"))
	parses := 0
	f, err := New(Options[int]{Paths: []string{path}, Interval: -1, Parse: func([][]byte) (int, error) { parses++; return parses, nil }})
	if err != nil {
		t.Fatal(err)
	}
	testcert.WriteFile(t, path, []byte("same"))
	if got := f.Get(); got != 1 || parses != 1 {
		t.Fatalf("Get = %d after %d parses, want 1 and 1", got, parses)
	}
}

func TestNewFailsOnMissingOrBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(Options[string]{Paths: []string{filepath.Join(dir, "none")}, Parse: upper}); err == nil {
		t.Fatal("missing file: no error")
	}
	empty := filepath.Join(dir, "empty")
	testcert.WriteFile(t, empty, nil)
	if _, err := New(Options[string]{Paths: []string{empty}, Parse: upper}); err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("unparsable file: err = %v", err)
	}
}

// Many requests at once while the file changes: no race, and every caller
// gets one of the two values.
func TestConcurrentGet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v")
	testcert.WriteFile(t, path, []byte("a"))
	f, err := New(Options[string]{Paths: []string{path}, Parse: upper, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if v := f.Get(); v != "A" && v != "B" {
					t.Errorf("Get = %q", v)
					return
				}
			}
		}()
	}
	testcert.WriteFile(t, path, []byte("b"))
	wg.Wait()
}

func serving(t *testing.T, c *Certificate) string {
	t.Helper()
	got, err := c.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf == nil {
		t.Fatal("no parsed leaf")
	}
	return got.Leaf.Subject.CommonName
}

func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	first, second := testcert.New(t, "first"), testcert.New(t, "second")
	certFile, keyFile := first.Write(t, dir)
	log, logs := newLogger()
	c, err := NewCertificate(CertificateOptions{CertFile: certFile, KeyFile: keyFile, Interval: -1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.ServerConfig(); cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("MinVersion = %x", cfg.MinVersion)
	}
	if got := serving(t, c); got != "first" {
		t.Fatalf("serving %q", got)
	}
	// Half-way through a rotation the new cert does not match the old key:
	// the old pair keeps serving.
	testcert.WriteFile(t, certFile, second.CertPEM)
	if got := serving(t, c); got != "first" {
		t.Fatalf("half-rotated: serving %q", got)
	}
	if !strings.Contains(logs.String(), "changed file not loaded") {
		t.Fatalf("the mismatched pair was not logged:\n%s", logs)
	}
	testcert.WriteFile(t, keyFile, second.KeyPEM)
	if got := serving(t, c); got != "second" {
		t.Fatalf("after rotation: serving %q", got)
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("the key reached the log")
	}
}

func TestCertificateNeedsBothFiles(t *testing.T) {
	certFile, keyFile := testcert.New(t, "x").Write(t, t.TempDir())
	for _, o := range []CertificateOptions{{CertFile: certFile}, {KeyFile: keyFile}, {CertFile: keyFile, KeyFile: certFile}} {
		if _, err := NewCertificate(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
