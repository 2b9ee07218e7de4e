package archive

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Defaults of Limits. Charts and profiles are small text files; these leave
// room for the largest public charts while keeping a hostile upload cheap.
const (
	// DefaultMaxCompressed stays under MongoDB's 16 MiB document limit,
	// as an archive is stored as one document.
	DefaultMaxCompressed = 15 << 20
	// DefaultMaxUncompressed and DefaultMaxFileSize are Helm's own loader
	// limits (100 MiB per chart, 5 MiB per file).
	DefaultMaxUncompressed = 100 << 20
	DefaultMaxFileSize     = 5 << 20
	DefaultMaxEntries      = 5000
	DefaultMaxDepth        = 20
	// DefaultMaxRatio is well above what text compresses to (10-30:1) and
	// far below deflate's maximum (about 1030:1) that bombs use.
	DefaultMaxRatio = 200
	// ratioFloor is how much must be unpacked before the ratio counts: a
	// tiny archive cannot hurt, whatever its ratio.
	ratioFloor = 1 << 20
)

// Limits bound one archive. A zero field takes its default; a negative one
// turns that limit off (tests, trusted tools).
type Limits struct {
	// MaxCompressed is the archive's own size in bytes.
	MaxCompressed int64 `json:"maxCompressed"`
	// MaxUncompressed is the total unpacked size of the tar stream, headers
	// included.
	MaxUncompressed int64 `json:"maxUncompressed"`
	// MaxFileSize bounds each file.
	MaxFileSize int64 `json:"maxFileSize"`
	// MaxEntries bounds files plus directories.
	MaxEntries int `json:"maxEntries"`
	// MaxDepth bounds the number of path components of an entry.
	MaxDepth int `json:"maxDepth"`
	// MaxRatio bounds unpacked bytes per compressed byte, checked once more
	// than 1 MiB has been unpacked.
	MaxRatio int64 `json:"maxRatio"`
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxCompressed, DefaultMaxCompressed)
	def(&l.MaxUncompressed, DefaultMaxUncompressed)
	def(&l.MaxFileSize, DefaultMaxFileSize)
	def(&l.MaxRatio, DefaultMaxRatio)
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	return l
}

// File is one regular file of an archive.
type File struct {
	// Name is the cleaned, slash-separated path inside the archive, without
	// a leading "./": "mychart/templates/deployment.yaml".
	Name string
	// Size is the size the tar header declares; the content is checked
	// against it.
	Size int64
}

// Summary describes an inspected archive.
type Summary struct {
	Files, Dirs  int
	Compressed   int64 // bytes of the archive read
	Uncompressed int64 // bytes of the tar stream unpacked
}

// Visit is called for each regular file with its content, which it may read
// (up to File.Size bytes) or leave; an error stops the inspection.
type Visit func(f File, content io.Reader) error

// Inspect reads a gzip-compressed tar archive from r, checking every entry
// and the limits, and calls visit (when not nil) for each regular file in
// archive order. Whatever visit leaves unread is read and discarded, so the
// whole archive is always checked.
func Inspect(r io.Reader, lim Limits, visit Visit) (Summary, error) {
	lim = lim.WithDefaults()
	in := &counter{r: r, limit: lim.MaxCompressed}
	var sum Summary
	zr, err := gzip.NewReader(bufio.NewReaderSize(in, 4096))
	if err != nil {
		return sum, readError(err, "not a gzip-compressed tar archive")
	}
	defer func() { _ = zr.Close() }()
	out := &counter{r: zr, limit: lim.MaxUncompressed, ratio: lim.MaxRatio, compressed: in}
	tr := tar.NewReader(out)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, readError(err, "not a gzip-compressed tar archive")
		}
		name, skip, err := entryName(h.Name, lim.MaxDepth)
		if err != nil {
			return sum, err
		}
		if skip || h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if sum.Files+sum.Dirs >= lim.MaxEntries && lim.MaxEntries > 0 {
			return sum, errdefs.TooLarge("archive holds more than %d entries", lim.MaxEntries)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			sum.Dirs++
			continue
		case tar.TypeReg: // the reader reports old-style regular files (TypeRegA) as TypeReg
		case tar.TypeSymlink, tar.TypeLink:
			return sum, errdefs.Invalid("archive entry %q is a link; only regular files and directories are accepted", name)
		default:
			return sum, errdefs.Invalid("archive entry %q is of type %q; only regular files and directories are accepted", name, string(h.Typeflag))
		}
		sum.Files++
		if h.Size < 0 || (lim.MaxFileSize > 0 && h.Size > lim.MaxFileSize) {
			return sum, errdefs.TooLarge("archive file %q is larger than %d bytes", name, lim.MaxFileSize)
		}
		if seen[name] {
			return sum, errdefs.Invalid("archive holds %q twice", name)
		}
		seen[name] = true
		if visit != nil {
			if err := visit(File{Name: name, Size: h.Size}, tr); err != nil {
				return sum, err
			}
		}
		// The rest of the file (all of it without a visit) is read here so
		// the limits see every byte.
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return sum, readError(err, "read archive file %q", name)
		}
	}
	// Trailing data after the tar end is read too: it counts for the limits
	// and a gzip stream must end cleanly.
	if _, err := io.Copy(io.Discard, out); err != nil {
		return sum, readError(err, "read archive")
	}
	sum.Compressed, sum.Uncompressed = in.n, out.n
	return sum, nil
}

// Read inspects an archive and returns the content of the regular files
// for which want returns true (every file when want is nil), by name.
func Read(r io.Reader, lim Limits, want func(File) bool) (map[string][]byte, Summary, error) {
	files := map[string][]byte{}
	sum, err := Inspect(r, lim, func(f File, content io.Reader) error {
		if want != nil && !want(f) {
			return nil
		}
		b := make([]byte, f.Size) // bounded by MaxFileSize, checked before visit
		if _, err := io.ReadFull(content, b); err != nil {
			return readError(err, "read archive file %q", f.Name)
		}
		files[f.Name] = b
		return nil
	})
	if err != nil {
		return nil, sum, err
	}
	return files, sum, nil
}

// entryName cleans a tar entry name. skip reports the archive root ("." or
// "./"), which carries nothing.
func entryName(raw string, maxDepth int) (name string, skip bool, err error) {
	if raw == "" || strings.ContainsRune(raw, 0) {
		return "", false, errdefs.Invalid("archive entry with an empty or malformed name")
	}
	if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, `\`) || (len(raw) >= 2 && raw[1] == ':') {
		return "", false, errdefs.Invalid("archive entry %q has an absolute path", raw)
	}
	if strings.ContainsRune(raw, '\\') {
		// Windows separators: refuse rather than guess, as "a\..\b" may
		// mean a parent reference to some tools.
		return "", false, errdefs.Invalid("archive entry %q uses backslashes; pack it with forward slashes", raw)
	}
	for _, part := range strings.Split(raw, "/") {
		if part == ".." {
			return "", false, errdefs.Invalid("archive entry %q refers to a parent directory", raw)
		}
	}
	name = path.Clean(raw)
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	if name == "." {
		return "", true, nil
	}
	if depth := strings.Count(name, "/") + 1; maxDepth > 0 && depth > maxDepth {
		return "", false, errdefs.TooLarge("archive entry %q is %d directories deep; the limit is %d", name, depth, maxDepth)
	}
	return name, false, nil
}

// counter counts bytes read through it and fails once more than limit have
// passed (limit <= 0: no limit). With compressed set, it also fails when the
// bytes it passed outgrow ratio times those compressed has passed.
type counter struct {
	r          io.Reader
	n, limit   int64
	ratio      int64
	compressed *counter
}

// errLimit marks a limit crossed inside a reader, so the error keeps its
// kind through archive/tar and compress/gzip.
type errLimit struct{ err error }

func (e errLimit) Error() string { return e.err.Error() }
func (e errLimit) Unwrap() error { return e.err }

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.limit > 0 && c.n > c.limit {
		what := "archive is larger than %d bytes"
		if c.compressed != nil {
			what = "archive unpacks to more than %d bytes"
		}
		return n, errLimit{errdefs.TooLarge(what, c.limit)}
	}
	if c.compressed != nil && c.ratio > 0 && c.n > ratioFloor && c.n > c.ratio*max(c.compressed.n, 1) {
		return n, errLimit{errdefs.TooLarge("archive unpacks to more than %d times its compressed size", c.ratio)}
	}
	return n, err
}

// readError keeps a limit's error as it is and makes anything else from the
// readers ErrInvalid.
func readError(err error, format string, args ...any) error {
	var lim errLimit
	if errors.As(err, &lim) {
		return lim.err
	}
	if errors.Is(err, errdefs.ErrTooLarge) || errors.Is(err, errdefs.ErrInvalid) {
		return err
	}
	return errdefs.InvalidWrap(err, "%s", fmt.Sprintf(format, args...))
}
