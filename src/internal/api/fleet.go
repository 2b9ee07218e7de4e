package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/fleet/join"
)

// Fleet registers pull clusters and joins their agents (join.Service).
type Fleet interface {
	Register(ctx context.Context, ref appcontext.ClusterRef) (join.Token, error)
	Exchange(ctx context.Context, token, chosen string) (join.Credential, error)
	Revoke(ctx context.Context, ref appcontext.ClusterRef) error
	Pulls(ref appcontext.ClusterRef) bool
}

var _ Fleet = (*join.Service)(nil)

// pJoin is where an agent exchanges its join token for its credential.
// It is open (the token is the credential of the call).
const pJoin = "/v2/fleet/join"

// clusterAnswer is a cluster created in pull mode: the object, and its
// join token, shown this once.
type clusterAnswer struct {
	catalog.Object[catalog.ClusterSpec]
	JoinToken        string    `json:"joinToken"`
	JoinTokenExpires time.Time `json:"joinTokenExpires"`
}

// checkClusterMode refuses modes Argus does not have, naming those it has
// (spec.gitOps is refused from the raw spec, checkClusterSpec).
func checkClusterMode(o *catalog.Object[catalog.ClusterSpec]) error {
	if o.Spec.Mode != "" && o.Spec.Mode != catalog.ClusterModePull {
		return errdefs.Invalid("spec.mode %.40q is not supported: leave it out and upload the cluster's kubeconfig, or say %q", o.Spec.Mode, catalog.ClusterModePull)
	}
	return nil
}

// createPullCluster registers a cluster in pull mode (a JSON body, no
// kubeconfig) and answers with a join token for its agent; clusters with
// a kubeconfig are the collection's multipart uploads, as in EMCO.
func (s *server) createPullCluster(clusters *catalog.Resource[catalog.ClusterSpec]) handlerFunc {
	return func(s *server, w http.ResponseWriter, r *http.Request) error {
		var obj catalog.Object[catalog.ClusterSpec]
		peek := &specPeek[catalog.ClusterSpec]{obj: &obj}
		err := s.decodeJSON(w, r, peek)
		if len(peek.spec) > 0 {
			if cerr := checkClusterSpec(peek.spec); cerr != nil {
				return cerr // a GitOps cluster is refused as such, whatever else the body lacks
			}
		}
		if err != nil {
			return err
		}
		if err := catalog.ValidateName(clusters.Kind().Name, obj.Metadata.Name); err != nil {
			return err
		}
		if err := checkClusterMode(&obj); err != nil {
			return err
		}
		if obj.Spec.Mode != catalog.ClusterModePull {
			return errdefs.Invalid(`a cluster is registered with its kubeconfig (multipart/form-data: part "metadata" and part "file") ` +
				`or in pull mode (JSON {"metadata":{"name":…},"spec":{"mode":"pull"}})`)
		}
		if s.opts.Fleet == nil {
			return errdefs.Invalid("pull mode is not available on this orchestrator")
		}
		key := append(varsKey(r, vProvider), obj.Metadata.Name)
		if err := clusters.Create(r.Context(), key, obj); err != nil {
			return err
		}
		ref := appcontext.ClusterRef{Provider: key[0], Name: key[1]}
		tok, err := s.opts.Fleet.Register(r.Context(), ref)
		if err != nil {
			// No cluster without its registration: the create is undone.
			ctx := context.WithoutCancel(r.Context())
			return errors.Join(err, clusters.Delete(ctx, key), s.opts.Fleet.Revoke(ctx, ref))
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, clusterAnswer{Object: obj, JoinToken: tok.Token, JoinTokenExpires: tok.Expires})
		return nil
	}
}

// fleetRoutes adds the join exchange and the new join token of a pull
// cluster.
func (s *server) fleetRoutes(r *mux.Router, clusters *catalog.Resource[catalog.ClusterSpec]) {
	if s.opts.Fleet == nil {
		return
	}
	r.HandleFunc(pJoin, s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		var body struct {
			Token string `json:"token"`
			// Credential, when set, is the one the agent chose (see
			// join.Service.Exchange): its exchange can then be repeated.
			Credential string `json:"credential"`
		}
		if err := s.decodeJSON(w, r, &body); err != nil {
			return err
		}
		if len(body.Token) > join.MaxTokenLength {
			return errdefs.Unauthorized("the join token is unknown, expired or already used")
		}
		cred, err := s.opts.Fleet.Exchange(r.Context(), body.Token, body.Credential)
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]string{"clusterProvider": cred.Cluster.Provider, "cluster": cred.Cluster.Name,
			"credential": cred.Credential})
		return nil
	})).Methods(http.MethodPost)
	r.HandleFunc(pCluster+"/join-token", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		key := varsKey(r, vCluster)
		if _, err := clusters.Get(r.Context(), key); err != nil {
			return err
		}
		ref := appcontext.ClusterRef{Provider: key[0], Name: key[1]}
		if !s.opts.Fleet.Pulls(ref) {
			return errdefs.Conflict("cluster %s is not in pull mode: it has no agent to join", ref)
		}
		tok, err := s.opts.Fleet.Register(r.Context(), ref)
		if err != nil {
			return err
		}
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusCreated, map[string]any{"joinToken": tok.Token, "joinTokenExpires": tok.Expires})
		return nil
	})).Methods(http.MethodPost)
}
