package tgz

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"testing"
)

// Dir packs a directory as a .tgz with the directory's name as the top
// folder, as `helm package` lays out a chart.
func Dir(t testing.TB, dir string) []byte {
	t.Helper()
	files := map[string]string{}
	base := filepath.Base(dir)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(filepath.Join(base, rel))] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return Files(t, files)
}

// Files packs files (path → content) as a .tgz, in name order.
func Files(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	entries := make([]Entry, 0, len(names))
	for _, n := range names {
		entries = append(entries, Entry{Name: n, Body: files[n]})
	}
	return Entries(t, entries...)
}

// Entry is one tar entry for Entries.
type Entry struct {
	Name string
	// Type is a tar type flag; 0 means a regular file.
	Type byte
	Body string
	// Link is the target of a link entry.
	Link string
}

// Entries packs entries, in order, as a .tgz: directories, links
// and devices too, for tests of what archives may hold.
func Entries(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Mode: 0o644, Linkname: e.Link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FromInside packs files as `tar czf x.tgz -C dir .` does: a "./"
// entry, "./"-prefixed names and an entry for each directory.
func FromInside(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	entries := []Entry{{Name: "./", Type: tar.TypeDir}}
	dirs := map[string]bool{".": true}
	for _, n := range names {
		if d := path.Dir(n); !dirs[d] {
			dirs[d] = true
			entries = append(entries, Entry{Name: "./" + d + "/", Type: tar.TypeDir})
		}
		entries = append(entries, Entry{Name: "./" + n, Body: files[n]})
	}
	return Entries(t, entries...)
}
