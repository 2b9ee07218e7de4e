package archive

import (
	"archive/tar"
	"bytes"
	"path"
	"strings"
	"testing"
)

// FuzzInspect feeds arbitrary bytes to the inspector: it never panics, and
// whatever it accepts stays within the limits and names only safe, relative
// paths.
func FuzzInspect(f *testing.F) {
	f.Add(pack(f, entry{Name: "c/Chart.yaml", Body: "name: c"}, entry{Name: "c/templates/a.yaml", Body: "kind: x"}))
	f.Add(pack(f, entry{Name: "./", Type: tar.TypeDir}, entry{Name: "./manifest.yaml", Body: "m"}))
	f.Add(pack(f, entry{Name: "../x", Body: "x"}))
	f.Add(pack(f, entry{Name: "l", Type: tar.TypeSymlink, Link: "/"}))
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"))
	lim := Limits{MaxCompressed: 1 << 20, MaxUncompressed: 4 << 20, MaxFileSize: 1 << 20, MaxEntries: 100, MaxDepth: 8}
	f.Fuzz(func(t *testing.T, data []byte) {
		files, sum, err := Read(bytes.NewReader(data), lim, nil)
		if err != nil {
			return
		}
		if sum.Files+sum.Dirs > lim.MaxEntries || sum.Uncompressed > lim.MaxUncompressed || sum.Compressed > lim.MaxCompressed {
			t.Fatalf("accepted beyond the limits: %+v", sum)
		}
		for name, b := range files {
			if path.IsAbs(name) || name != path.Clean(name) || strings.HasPrefix(name, "../") || name == ".." || strings.HasPrefix(name, "./") {
				t.Fatalf("accepted unsafe name %q", name)
			}
			if int64(len(b)) > lim.MaxFileSize || strings.Count(name, "/")+1 > lim.MaxDepth {
				t.Fatalf("accepted %q of %d bytes", name, len(b))
			}
		}
	})
}
