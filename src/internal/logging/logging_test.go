package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
)

func decodeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func TestSlogBridgeHonoursThresholdAndFields(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	s := Slog(logrus.NewEntry(l).WithField("component", "ferretdb"), slog.LevelError).With("conn", 7)
	s.Info("dropped")
	s.Error("kept", "op", "insert")
	lines := decodeLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("lines = %v", lines)
	}
	got := lines[0]
	if got["msg"] != "kept" || got["level"] != "error" || got["op"] != "insert" || got["component"] != "ferretdb" || got["conn"] != float64(7) {
		t.Fatalf("entry = %v", got)
	}
}

func TestZapBridgeLevelCanBeRaised(t *testing.T) {
	var buf bytes.Buffer
	l, _ := New(&buf, "json", "info")
	level := zap.NewAtomicLevelAt(zap.WarnLevel)
	z := Zap(logrus.NewEntry(l), level).Named("etcd").With(zap.String("member", "m1"))
	z.Info("dropped")
	z.Warn("kept", zap.Int("n", 2))
	level.SetLevel(zap.FatalLevel)
	z.Error("silenced while closing")
	lines := decodeLines(t, &buf)
	if len(lines) != 1 || lines[0]["msg"] != "kept" || lines[0]["member"] != "m1" || lines[0]["logger"] != "etcd" || lines[0]["n"] != float64(2) {
		t.Fatalf("lines = %v", lines)
	}
}

func TestNewRejectsUnknownFormat(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "xml", "info"); err == nil {
		t.Fatal("want an error for format xml")
	}
	if _, err := New(&bytes.Buffer{}, "json", "loud"); err == nil {
		t.Fatal("want an error for level loud")
	}
}
