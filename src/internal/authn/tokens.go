package authn

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/reload"
)

// Options configures a TokenFile.
type Options struct {
	// Path of the token file; required.
	Path string
	// Interval between looks at the file; 0 means reload.DefaultInterval.
	Interval time.Duration
	// Logger; nil discards. Tokens are never logged.
	Logger *logrus.Entry
}

// digest is a token's SHA-256: comparing fixed-length digests means the
// comparison time says nothing about a token's length.
type digest [sha256.Size]byte

// TokenFile is the set of valid bearer tokens, following its file.
type TokenFile struct {
	file *reload.File[[]digest]
}

// NewTokenFile loads the token file. A file that cannot be read, is
// malformed or holds no token is an error: starting with authentication
// configured but nobody able to pass it is a mistake worth stopping for.
func NewTokenFile(opts Options) (*TokenFile, error) {
	if opts.Path == "" {
		return nil, errors.New("authn: a token file path is required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	log := opts.Logger.WithField("file", opts.Path)
	f, err := reload.New(reload.Options[[]digest]{
		Paths:    []string{opts.Path},
		Interval: opts.Interval,
		Logger:   log,
		Parse: func(c [][]byte) ([]digest, error) {
			ds, err := parseTokens(c[0])
			if err == nil && len(ds) == 0 {
				// After start-up an emptied file is honoured (it revokes
				// everything), but loudly.
				log.Warn("the token file holds no token; every authenticated request is refused")
			}
			return ds, err
		},
	})
	if err != nil {
		return nil, fmt.Errorf("authn: %w", err)
	}
	if len(f.Get()) == 0 {
		return nil, fmt.Errorf("authn: token file %s holds no token", opts.Path)
	}
	return &TokenFile{file: f}, nil
}

// parseTokens reads a token file's contents into token digests. Errors name
// line numbers, never contents.
func parseTokens(data []byte) ([]digest, error) {
	var out []digest
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// A bearer token is one HTTP token68; whitespace inside means a
		// line holds something else (two tokens, a trailing comment).
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("line %d: a token must not contain whitespace", n)
		}
		out = append(out, sha256.Sum256([]byte(line)))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return out, nil
}

// Valid reports whether token is one of the file's tokens. Every token is
// compared, whichever matches, so timing reveals neither which one nor how
// many characters agreed.
func (t *TokenFile) Valid(token string) bool {
	if token == "" {
		return false
	}
	sum := digest(sha256.Sum256([]byte(token)))
	match := 0
	for _, d := range t.file.Get() {
		match |= subtle.ConstantTimeCompare(sum[:], d[:])
	}
	return match == 1
}
