package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// Formats and levels accepted by New, for flag validation.
var (
	Formats = []string{"json", "text"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// New returns a logger writing to out in the given format ("json" or "text")
// at the given level.
func New(out io.Writer, format, level string) (*logrus.Logger, error) {
	l := logrus.New()
	l.SetOutput(out)
	switch format {
	case "json", "":
		l.SetFormatter(&logrus.JSONFormatter{})
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	default:
		return nil, fmt.Errorf("unknown log format %q", format)
	}
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	l.SetLevel(lvl)
	return l, nil
}

// Discard returns a logger that drops everything; for tests and defaults.
func Discard() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// Slog returns a log/slog logger that forwards records at or above min into
// entry, so embedded libraries log in our format and at our chosen threshold.
func Slog(entry *logrus.Entry, min slog.Level) *slog.Logger {
	return slog.New(&slogBridge{entry: entry, min: min})
}

type slogBridge struct {
	entry *logrus.Entry
	min   slog.Level
}

func (h *slogBridge) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h *slogBridge) Handle(_ context.Context, r slog.Record) error {
	fields := logrus.Fields{}
	r.Attrs(func(a slog.Attr) bool {
		fields[a.Key] = a.Value.Resolve().Any()
		return true
	})
	e := h.entry.WithFields(fields).WithTime(r.Time)
	switch {
	case r.Level >= slog.LevelError:
		e.Error(r.Message)
	case r.Level >= slog.LevelWarn:
		e.Warn(r.Message)
	case r.Level >= slog.LevelInfo:
		e.Info(r.Message)
	default:
		e.Debug(r.Message)
	}
	return nil
}

func (h *slogBridge) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := logrus.Fields{}
	for _, a := range attrs {
		fields[a.Key] = a.Value.Resolve().Any()
	}
	return &slogBridge{entry: h.entry.WithFields(fields), min: h.min}
}

func (h *slogBridge) WithGroup(name string) slog.Handler {
	return &slogBridge{entry: h.entry.WithField("group", name), min: h.min}
}
