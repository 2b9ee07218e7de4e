package hub

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// keys lays out the hub's records under <prefix>/fleet/.
type keys struct{ base string }

func newKeys(prefix string) keys {
	if prefix == "" {
		prefix = "/argus"
	}
	return keys{base: strings.TrimSuffix(prefix, "/") + "/fleet/"}
}

func (k keys) workPrefix() string { return k.base + "work/" }
func (k keys) clusterWork(ref appcontext.ClusterRef) string {
	return k.workPrefix() + ref.String() + "/"
}
func (k keys) work(ref appcontext.ClusterRef, id, app string) string {
	return k.clusterWork(ref) + id + "/" + app
}
func (k keys) reportsPrefix() string { return k.base + "reports/" }
func (k keys) report(ref appcontext.ClusterRef, id, app string) string {
	return k.reportsPrefix() + ref.String() + "/" + id + "/" + app
}
func (k keys) sessionsPrefix() string                   { return k.base + "sessions/" }
func (k keys) session(ref appcontext.ClusterRef) string { return k.sessionsPrefix() + ref.String() }

// ForgetOps are what a deleted pull cluster leaves under prefix beside
// its registration — its recorded state (stateKey, the contexts' key for
// it) and its agent's session key — for join.Options.Forget: deleted with
// the registration, no late write of a stream or keeper brings them back
// (each is guarded by the session key or the registration).
func ForgetOps(prefix, stateKey string, ref appcontext.ClusterRef) []clientv3.Op {
	return []clientv3.Op{clientv3.OpDelete(stateKey), clientv3.OpDelete(newKeys(prefix).session(ref))}
}

// placementKey names one placement of one cluster.
type placementKey struct {
	ref     appcontext.ClusterRef
	id, app string
}

// parsePlacement parses "<cluster>/<context>/<app>" (what follows a
// prefix); context ids and cluster refs hold no '/', apps none either.
func parsePlacement(rest string) (placementKey, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return placementKey{}, false
	}
	ref, err := appcontext.ParseClusterRef(parts[0])
	if err != nil {
		return placementKey{}, false
	}
	return placementKey{ref: ref, id: parts[1], app: parts[2]}, true
}

// workRecord is one placement's work as stored; the generation is the
// record's etcd revision.
type workRecord struct {
	Context         string         `json:"context"`
	App             string         `json:"app"`
	StatusID        string         `json:"statusId"`
	Namespace       string         `json:"namespace"`
	FieldValidation string         `json:"fieldValidation,omitempty"`
	Delete          bool           `json:"delete,omitempty"`
	Update          bool           `json:"update,omitempty"`
	Group           string         `json:"group,omitempty"`
	Adopt           bool           `json:"adopt,omitempty"`
	Resources       []workResource `json:"resources"`
}

type workResource struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Removed   bool   `json:"removed,omitempty"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	// Hook is set on a Helm hook: the agent's rsync runs it at its events.
	Hook *appcontext.Hook `json:"hook,omitempty"`
}

// key is the resource's key within its placement.
func (r workResource) key() string {
	return appcontext.Resource{GVK: schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}, Name: r.Name, Namespace: r.Namespace}.Key()
}

// progressRecord is an agent's progress on a placement.
type progressRecord struct {
	Generation int64 `json:"generation"`
	Quiet      bool  `json:"quiet,omitempty"`
	Settled    bool  `json:"settled,omitempty"`
}

// sessionRecord is the value of a session key: what guards every write
// of the session.
type sessionRecord struct {
	Session string `json:"session"`
	Replica string `json:"replica"`
	Since   string `json:"since"`
}
