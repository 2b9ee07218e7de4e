package logging

import (
	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap returns a zap logger (etcd logs through zap) that forwards entries at or
// above level into entry. The caller keeps level to raise it, for example to
// silence the errors etcd logs while it is being closed on purpose.
func Zap(entry *logrus.Entry, level zap.AtomicLevel) *zap.Logger {
	return zap.New(&zapBridge{entry: entry, level: level})
}

type zapBridge struct {
	entry *logrus.Entry
	level zap.AtomicLevel
}

func (c *zapBridge) Enabled(l zapcore.Level) bool { return c.level.Enabled(l) }

func (c *zapBridge) With(fields []zapcore.Field) zapcore.Core {
	return &zapBridge{entry: c.entry.WithFields(zapFields(fields)), level: c.level}
}

func (c *zapBridge) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapBridge) Write(e zapcore.Entry, fields []zapcore.Field) error {
	le := c.entry.WithFields(zapFields(fields)).WithTime(e.Time)
	if e.LoggerName != "" {
		le = le.WithField("logger", e.LoggerName)
	}
	switch {
	case e.Level >= zapcore.ErrorLevel:
		le.Error(e.Message)
	case e.Level >= zapcore.WarnLevel:
		le.Warn(e.Message)
	case e.Level >= zapcore.InfoLevel:
		le.Info(e.Message)
	default:
		le.Debug(e.Message)
	}
	return nil
}

func (c *zapBridge) Sync() error { return nil }

func zapFields(fields []zapcore.Field) logrus.Fields {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	return logrus.Fields(enc.Fields)
}
