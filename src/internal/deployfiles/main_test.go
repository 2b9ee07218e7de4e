package deployfiles

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/argus-mc/argus/src/internal/testenv"
)

// No stores are needed here; the one test that needs a cluster starts its
// own, so TestMain only checks for leaked goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions()...)
}

// repoPath returns the absolute path of a file given relative to the
// repository root; tests run in this package's directory.
func repoPath(t *testing.T, rel ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"..", "..", ".."}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, rel ...string) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, rel...))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
