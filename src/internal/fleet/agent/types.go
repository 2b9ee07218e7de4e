package agent

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// WorkKey names one placement: an app of a context on this cluster.
type WorkKey struct {
	Context, App string
}

// Work is what one placement must be on the cluster.
type Work struct {
	Key             WorkKey
	Generation      int64
	StatusID        string
	Namespace       string
	FieldValidation string
	// Delete asks for the placement's deletion; Update says it comes
	// from an update (Helm's install hooks do not run).
	Delete, Update bool
	// Group is the deployment the placement belongs to (the owner rsync
	// writes on objects); Adopt lets it adopt objects that allow it.
	Group     string
	Adopt     bool
	Resources []Resource
}

// Resource is one object of a placement, its manifest filled in.
type Resource struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string
	Removed   bool
	SHA256    string
	Manifest  []byte
	// Hook is set on a Helm hook, which rsync runs at its events.
	Hook *appcontext.Hook
}

// Bundle is a ResourceBundleState's status as the monitor wrote it.
type Bundle struct {
	Namespace, Name string
	// StatusID and App are its argus.io labels.
	StatusID, App   string
	ResourceVersion string
	Status          []byte // JSON
	Deleted         bool
}

// Cluster is the agent's Kubernetes side.
type Cluster interface {
	// Run runs until ctx ends, telling r what changes.
	Run(ctx context.Context, r Reporter) error
	// Apply makes w the desired state of its placement (or, w.Delete,
	// deletes it); it does not block.
	Apply(w Work)
	// Forget drops a placement the orchestrator no longer has, leaving
	// its objects as they are; it does not block.
	Forget(k WorkKey)
	// Monitor is the in-cluster monitor's state: appcontext.MonitorRunning
	// or MonitorNotInstalled with a reason.
	Monitor() (state, reason string)
}

// Reporter is told what changes on the cluster; its methods do not block.
type Reporter interface {
	// Statuses reports rsync statuses of a placement's resources (by
	// appcontext.Resource.Key) while working on generation gen.
	Statuses(k WorkKey, gen int64, statuses map[string]appcontext.ResourceStatus)
	// Progress reports that every resource of generation gen was tried
	// (quiet) or that the action on it ended (settled).
	Progress(k WorkKey, gen int64, quiet, settled bool)
	// Bundle reports a bundle's status or deletion.
	Bundle(b Bundle)
}
