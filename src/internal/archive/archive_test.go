package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// entry is one tar entry for pack.
type entry = tgz.Entry

func pack(t testing.TB, entries ...entry) []byte {
	t.Helper()
	return tgz.Entries(t, entries...)
}

func TestReadLayouts(t *testing.T) {
	cases := map[string]struct {
		entries []entry
		want    []string
	}{
		"helm package": {[]entry{{Name: "web/", Type: tar.TypeDir}, {Name: "web/Chart.yaml", Body: "x"}, {Name: "web/templates/a.yaml", Body: "y"}},
			[]string{"web/Chart.yaml", "web/templates/a.yaml"}},
		"packed from inside (-C chart .)": {[]entry{{Name: "./", Type: tar.TypeDir}, {Name: "./Chart.yaml", Body: "x"}, {Name: "./templates/", Type: tar.TypeDir}, {Name: "./templates/a.yaml", Body: "y"}},
			[]string{"Chart.yaml", "templates/a.yaml"}},
		"files at the root": {[]entry{{Name: "Chart.yaml", Body: "x"}, {Name: "templates/a.yaml", Body: "y"}},
			[]string{"Chart.yaml", "templates/a.yaml"}},
		"root entry named .": {[]entry{{Name: ".", Type: tar.TypeDir}, {Name: "./manifest.yaml", Body: "m"}},
			[]string{"manifest.yaml"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			files, sum, err := Read(bytes.NewReader(pack(t, tc.entries...)), Limits{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for n := range files {
				got = append(got, n)
			}
			if len(got) != len(tc.want) || sum.Files != len(tc.want) {
				t.Fatalf("files %v (summary %+v), want %v", got, sum, tc.want)
			}
			for _, w := range tc.want {
				if _, ok := files[w]; !ok {
					t.Fatalf("files %v lack %s", got, w)
				}
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	big := strings.Repeat("a", 2000)
	cases := map[string]struct {
		data []byte
		lim  Limits
		kind error
		want string
	}{
		"not gzip":          {[]byte("hello"), Limits{}, errdefs.ErrInvalid, "not a gzip-compressed tar archive"},
		"gzip, not tar":     {gz(t, []byte(strings.Repeat("not a tar header ", 64))), Limits{}, errdefs.ErrInvalid, "not a gzip-compressed tar archive"},
		"absolute path":     {pack(t, entry{Name: "/etc/passwd", Body: "x"}), Limits{}, errdefs.ErrInvalid, "absolute path"},
		"drive letter":      {pack(t, entry{Name: "C:/x", Body: "x"}), Limits{}, errdefs.ErrInvalid, "absolute path"},
		"parent reference":  {pack(t, entry{Name: "chart/../../x", Body: "x"}), Limits{}, errdefs.ErrInvalid, "parent directory"},
		"backslashes":       {pack(t, entry{Name: `chart\..\x`, Body: "x"}), Limits{}, errdefs.ErrInvalid, "backslashes"},
		"symlink":           {pack(t, entry{Name: "chart/l", Type: tar.TypeSymlink, Link: "/etc/passwd"}), Limits{}, errdefs.ErrInvalid, "link"},
		"hard link":         {pack(t, entry{Name: "chart/l", Type: tar.TypeLink, Link: "chart/a"}), Limits{}, errdefs.ErrInvalid, "link"},
		"char device":       {pack(t, entry{Name: "chart/d", Type: tar.TypeChar}), Limits{}, errdefs.ErrInvalid, "type"},
		"fifo":              {pack(t, entry{Name: "chart/f", Type: tar.TypeFifo}), Limits{}, errdefs.ErrInvalid, "type"},
		"duplicate":         {pack(t, entry{Name: "a", Body: "1"}, entry{Name: "./a", Body: "2"}), Limits{}, errdefs.ErrInvalid, "twice"},
		"compressed size":   {pack(t, entry{Name: "a", Body: big}), Limits{MaxCompressed: 10}, errdefs.ErrTooLarge, "archive is larger than 10 bytes"},
		"uncompressed size": {pack(t, entry{Name: "a", Body: big}), Limits{MaxUncompressed: 1000, MaxFileSize: -1}, errdefs.ErrTooLarge, "unpacks to more than 1000 bytes"},
		"file size":         {pack(t, entry{Name: "a", Body: big}), Limits{MaxFileSize: 1999}, errdefs.ErrTooLarge, `file "a" is larger than 1999 bytes`},
		"entries":           {pack(t, entry{Name: "a/", Type: tar.TypeDir}, entry{Name: "a/b", Body: "x"}, entry{Name: "a/c", Body: "x"}), Limits{MaxEntries: 2}, errdefs.ErrTooLarge, "more than 2 entries"},
		"depth":             {pack(t, entry{Name: "a/b/c/d", Body: "x"}), Limits{MaxDepth: 3}, errdefs.ErrTooLarge, "4 directories deep"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Inspect(bytes.NewReader(tc.data), tc.lim, nil)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.kind, tc.want)
			}
		})
	}
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func TestVisitSeesContentAndLimitsStillApply(t *testing.T) {
	data := pack(t, entry{Name: "c/Chart.yaml", Body: "name: c"}, entry{Name: "c/big", Body: strings.Repeat("z", 5000)})
	var seen []string
	_, err := Inspect(bytes.NewReader(data), Limits{MaxUncompressed: 4000, MaxFileSize: -1}, func(f File, r io.Reader) error {
		seen = append(seen, f.Name)
		return nil // leaves the content unread: Inspect reads it for the limits
	})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("err = %v, want the uncompressed limit although visit read nothing", err)
	}
	if len(seen) == 0 || seen[0] != "c/Chart.yaml" {
		t.Fatalf("visited %v", seen)
	}
}

// The two bombs, generated as streams and never held in memory:
// each is refused quickly, having read only a small part of its input.
func TestBombsAreRefusedEarly(t *testing.T) {
	cases := map[string]func(io.Writer) error{
		"100,000 tiny files":         func(w io.Writer) error { return tgz.TinyFiles(w, 100_000) },
		"one 4 GiB file of zeros":    func(w io.Writer) error { return tgz.Zeros(w, 4<<30) },
		"1,000 files of 4 MiB zeros": func(w io.Writer) error { return tgz.ZeroFiles(w, 1000, 4<<20) },
	}
	for name, gen := range cases {
		t.Run(name, func(t *testing.T) {
			pr, pw := io.Pipe()
			done := make(chan struct{})
			go func() { defer close(done); _ = pw.CloseWithError(gen(pw)) }()
			defer func() { <-done }()
			start := time.Now()
			sum, err := Inspect(pr, Limits{}, nil)
			_ = pr.CloseWithError(errors.New("inspection over")) // stops the generator
			if !errors.Is(err, errdefs.ErrTooLarge) {
				t.Fatalf("err = %v, want ErrTooLarge", err)
			}
			t.Logf("refused in %v after %d entries: %v", time.Since(start), sum.Files+sum.Dirs, err)
		})
	}
}

func TestBombGeneratorsMakeValidArchives(t *testing.T) {
	var tiny, zeros bytes.Buffer
	if err := tgz.TinyFiles(&tiny, 10); err != nil {
		t.Fatal(err)
	}
	if err := tgz.Zeros(&zeros, 3<<20); err != nil {
		t.Fatal(err)
	}
	if sum, err := Inspect(&tiny, Limits{}, nil); err != nil || sum.Files != 10 {
		t.Fatalf("tiny: %+v %v", sum, err)
	}
	sum, err := Inspect(bytes.NewReader(zeros.Bytes()), Limits{MaxRatio: -1}, nil)
	if err != nil || sum.Files != 1 || sum.Uncompressed < 3<<20 {
		t.Fatalf("zeros: %+v %v", sum, err)
	}
	if _, err := Inspect(bytes.NewReader(zeros.Bytes()), Limits{}, nil); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "times its compressed size") {
		t.Fatalf("zeros with the default ratio: %v", err)
	}
}

func TestSummaryCounts(t *testing.T) {
	data := pack(t, entry{Name: "c/", Type: tar.TypeDir}, entry{Name: "c/a", Body: "12345"})
	sum, err := Inspect(bytes.NewReader(data), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files != 1 || sum.Dirs != 1 || sum.Compressed != int64(len(data)) || sum.Uncompressed < 1024 {
		t.Fatalf("summary %+v (archive %d bytes)", sum, len(data))
	}
}

// With the per-file limit off, a lying header or a file just under it is
// still stopped by the ratio, after about a megabyte of work.
func TestRatioStopsZerosWhateverTheFileLimit(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); _ = pw.CloseWithError(tgz.Zeros(pw, 4<<30)) }()
	_, err := Inspect(pr, Limits{MaxFileSize: -1}, nil)
	_ = pr.CloseWithError(errors.New("inspection over"))
	<-done
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "times its compressed size") {
		t.Fatalf("err = %v, want the ratio limit", err)
	}
}

// BenchmarkInspect10MB reports the allocations of inspecting a 10 MB
// archive: a fixed amount, whatever the archive's size.
func BenchmarkInspect10MB(b *testing.B) {
	data := randomArchive(b, 10<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Inspect(bytes.NewReader(data), Limits{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// randomArchive packs incompressible files of 1 MiB up to about size bytes.
func randomArchive(t testing.TB, size int) []byte {
	t.Helper()
	var entries []entry
	seed := uint64(1)
	for i := 0; i*(1<<20) < size; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			seed = seed*6364136223846793005 + 1442695040888963407
			b[j] = byte(seed >> 56)
		}
		entries = append(entries, entry{Name: "c/f" + strings.Repeat("x", i%5) + string(rune('a'+i)), Body: string(b)})
	}
	return pack(t, entries...)
}
