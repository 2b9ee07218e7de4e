package testenv

import (
	"os"
	"strings"
	"testing"
)

// CheckGenerated checks that the part of the file at path between
// "<!-- BEGIN name (generated) -->\n" and "<!-- END name -->" equals want;
// with update it rewrites that part instead (make docs).
func CheckGenerated(t *testing.T, path, name, want string, update bool) {
	t.Helper()
	begin, end := "<!-- BEGIN "+name+" (generated) -->\n", "<!-- END "+name+" -->"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers of %s", path, name)
	}
	if string(doc[i+len(begin):j]) == want {
		return
	}
	if !update {
		t.Fatalf("%s is out of date; run `make docs`", path)
	}
	fixed := string(doc[:i+len(begin)]) + want + string(doc[j:])
	if err := os.WriteFile(path, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
}
