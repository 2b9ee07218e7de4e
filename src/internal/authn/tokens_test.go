package authn

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func tokenFile(t *testing.T, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	testcert.WriteFile(t, path, []byte(contents))
	return path
}

func TestValid(t *testing.T) {
	path := tokenFile(t, "# ops team\n\n  alpha-123  \nbeta.456\n#gamma\n")
	tf, err := NewTokenFile(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]bool{
		"alpha-123": true, "beta.456": true,
		"": false, "gamma": false, "#gamma": false, "alpha": false, "alpha-1234": false, "# ops team": false,
	} {
		if got := tf.Valid(token); got != want {
			t.Errorf("Valid(%q) = %v, want %v", token, got, want)
		}
	}
}

func TestRotation(t *testing.T) {
	path := tokenFile(t, "old\n")
	var logs bytes.Buffer
	l := logrus.New()
	l.SetOutput(&logs)
	tf, err := NewTokenFile(Options{Path: path, Interval: -1, Logger: logrus.NewEntry(l)})
	if err != nil {
		t.Fatal(err)
	}
	testcert.WriteFile(t, path, []byte("old\nnew\n")) // both during the hand-over
	if !tf.Valid("old") || !tf.Valid("new") {
		t.Fatal("during the hand-over both tokens must work")
	}
	testcert.WriteFile(t, path, []byte("new\n"))
	if tf.Valid("old") || !tf.Valid("new") {
		t.Fatal("after the hand-over only the new token may work")
	}
	testcert.WriteFile(t, path, []byte("new\nbad line\n")) // a broken edit keeps the last good set
	if !tf.Valid("new") {
		t.Fatal("a malformed file revoked the tokens")
	}
	testcert.WriteFile(t, path, []byte("# nobody\n")) // emptied on purpose: revokes all
	if tf.Valid("new") {
		t.Fatal("an emptied file must revoke every token")
	}
	if !strings.Contains(logs.String(), "holds no token") {
		t.Fatalf("revoking everything was not logged:\n%s", logs.String())
	}
	for _, secret := range []string{"old", "new", "bad line"} {
		if strings.Contains(logs.String(), `"`+secret) || strings.Contains(logs.String(), "="+secret) {
			t.Fatalf("a token reached the log:\n%s", logs.String())
		}
	}
}

// The default interval spaces the looks; the token file's change is seen
// after it.
func TestDefaultIntervalStillSeesChanges(t *testing.T) {
	path := tokenFile(t, "a\n")
	tf, err := NewTokenFile(Options{Path: path, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testcert.WriteFile(t, path, []byte("b\n"))
	deadline := time.Now().Add(5 * time.Second)
	for !tf.Valid("b") {
		if time.Now().After(deadline) {
			t.Fatal("the changed file was not picked up")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func TestBadFilesAreRefusedAtStart(t *testing.T) {
	for name, contents := range map[string]string{
		"no token":        "# just a comment\n\n",
		"empty":           "",
		"two on one line": "a b\n",
	} {
		if _, err := NewTokenFile(Options{Path: tokenFile(t, contents)}); err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "a b") {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}
	if _, err := NewTokenFile(Options{Path: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("missing file: no error")
	}
	if _, err := NewTokenFile(Options{}); err == nil {
		t.Error("no path: no error")
	}
}
