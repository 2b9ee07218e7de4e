package testenv

import (
	"testing"

	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// Archive packs a directory as a .tgz with the directory's name as the top
// folder, as `helm package` lays out a chart (tgz.Dir).
func Archive(t testing.TB, dir string) []byte { t.Helper(); return tgz.Dir(t, dir) }

// ArchiveFiles packs files (path → content) as a .tgz (tgz.Files).
func ArchiveFiles(t testing.TB, files map[string]string) []byte {
	t.Helper()
	return tgz.Files(t, files)
}
