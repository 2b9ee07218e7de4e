package monitor

import (
	"errors"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures a Monitor. Zero values are the documented defaults,
// except Config, which is required.
type Options struct {
	Config *rest.Config
	// Namespace restricts the watched namespaced objects and bundles; "" is all.
	Namespace string
	// ExtraGVKs are watched in addition to the built-in kinds.
	ExtraGVKs []schema.GroupVersionKind
	// ConfigMapName, in LeaseNamespace, may list more kinds under the key
	// "extra-gvks" (same syntax as the flag); changes apply without a restart.
	// "" means "argus-monitor".
	ConfigMapName string
	// LeaseNamespace and LeaseName locate the heartbeat Lease; "" means
	// kube-system and argus-monitor.
	LeaseNamespace string
	LeaseName      string
	// Identity is the Lease holder; "" means $POD_NAME or the host name.
	Identity string
	// RenewInterval and LeaseDuration of the heartbeat; 0 means 10s and 30s.
	RenewInterval time.Duration
	LeaseDuration time.Duration
	// CoalesceWindow: an event after a quiet window syncs its bundle at
	// once; events within the window after a sync are gathered into one
	// sync at its end, so a bundle is rebuilt at most once per window.
	// 0 means 50ms.
	CoalesceWindow time.Duration
	// MinWriteInterval bounds the write rate of one bundle's status during
	// churn: one write per interval on average, at most two back to back
	// (a change after a quiet period and the trailing write gathering what
	// followed it), so at most 2 + T/interval writes in any span T.
	// 0 means 500ms.
	MinWriteInterval time.Duration
	// MaxStatusBytes is the size a status is trimmed to; 0 means 1,000,000,
	// well under the API server's 1.5 MiB object limit.
	MaxStatusBytes int
	// Workers syncing bundles; 0 means 2.
	Workers int
	// Logger; nil discards. Registerer for metrics; nil means none.
	Logger     *logrus.Entry
	Registerer prometheus.Registerer
}

func (o *Options) defaults() error {
	if o.Config == nil {
		return errors.New("monitor: a Kubernetes client configuration is required")
	}
	if o.ConfigMapName == "" {
		o.ConfigMapName = "argus-monitor"
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = "kube-system"
	}
	if o.LeaseName == "" {
		o.LeaseName = "argus-monitor"
	}
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = 10 * time.Second
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 30 * time.Second
	}
	if o.CoalesceWindow == 0 {
		o.CoalesceWindow = 50 * time.Millisecond
	}
	if o.MinWriteInterval == 0 {
		o.MinWriteInterval = 500 * time.Millisecond
	}
	if o.MaxStatusBytes == 0 {
		o.MaxStatusBytes = 1_000_000
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logging.Discard())
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	return nil
}
