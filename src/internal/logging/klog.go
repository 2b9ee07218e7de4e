package logging

import (
	"log/slog"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// RouteKlog sends what client-go logs through klog — reflector and
// informer errors, leader and event messages — into entry at info and
// above, so those lines take the process's --log-format and level like
// its own. klog's logger belongs to the process: main calls this once,
// before any client starts (klog's setter is not safe against concurrent
// logging).
func RouteKlog(entry *logrus.Entry) {
	klog.SetSlogLogger(Slog(entry, slog.LevelInfo))
}
