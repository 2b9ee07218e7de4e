package api

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// checkClusterSpec refuses a cluster EMCO would sync through GitOps
// (spec.gitOps): Argus would otherwise drop the field and deploy to the
// cluster directly with whatever the file part holds.
func checkClusterSpec(raw json.RawMessage) error {
	var spec struct {
		GitOps json.RawMessage `json:"gitOps"`
	}
	if json.Unmarshal(raw, &spec) != nil {
		return nil // not an object: the object's own decoding says so
	}
	if g := strings.TrimSpace(string(spec.GitOps)); g == "" || g == "null" || g == "{}" {
		return nil
	}
	return errdefs.Invalid("GitOps clusters (spec.gitOps) are not supported: Argus applies to a cluster with the " +
		"kubeconfig uploaded in part \"file\"; register the cluster without spec.gitOps")
}

// clusterWithLabels is an entry of EMCO's ?withLabels=true answer.
type clusterWithLabels struct {
	Metadata catalog.Metadata `json:"metadata"`
	Labels   []labelBody      `json:"labels"`
}

// clustersView answers EMCO's cluster list queries: ?label=X lists the
// names of the provider's clusters with that label, ?withLabels=true
// every cluster with its labels. Other lists are not its to answer.
func (s *server) clustersView(r *http.Request) (any, bool, error) {
	q := r.URL.Query()
	label, withLabels := q.Get("label"), strings.EqualFold(q.Get("withLabels"), "true")
	if label == "" && !withLabels {
		return nil, false, nil
	}
	if label != "" {
		if err := catalog.ValidateName("cluster label", label); err != nil {
			return nil, true, err
		}
	}
	provider := mux.Vars(r)["clusterProvider"]
	cat := s.opts.Catalog
	if _, err := catalog.For[catalog.Empty](cat, catalog.ClusterProviders).Get(r.Context(), catalog.Key{provider}); err != nil {
		return nil, true, err
	}
	clusters, err := catalog.For[catalog.Empty](cat, catalog.Clusters).List(r.Context(), catalog.Key{provider})
	if err != nil {
		return nil, true, err
	}
	labels := catalog.For[catalog.Empty](cat, catalog.ClusterLabels)
	names := []string{}
	all := []clusterWithLabels{}
	for _, c := range clusters {
		list, err := labels.List(r.Context(), catalog.Key{provider, c.Metadata.Name})
		if err != nil {
			return nil, true, err
		}
		entry := clusterWithLabels{Metadata: c.Metadata, Labels: []labelBody{}}
		for _, l := range list {
			entry.Labels = append(entry.Labels, labelBody{l.Metadata.Name})
			if l.Metadata.Name == label {
				names = append(names, c.Metadata.Name)
			}
		}
		all = append(all, entry)
	}
	if label != "" {
		return names, true, nil
	}
	return all, true, nil
}

// unimplemented is an EMCO controller's endpoint group that Argus does
// not serve: a request under it is answered 501 naming the controller,
// not 404 as if the path were mistyped.
type unimplemented struct {
	controller string
	path       *regexp.Regexp
}

// Path segments as EMCO's routers match them.
const (
	segment     = `[^/]+`
	emcoDIGPath = `^/v2/projects/` + segment + `/composite-apps/` + segment + `/` + segment + `/deployment-intent-groups/` + segment
	subtree     = `(/.*)?$`
)

// unimplementedControllers are the endpoint groups of EMCO's controllers
// Argus does not implement, by EMCO's routers (emco-base f12558f).
var unimplementedControllers = []unimplemented{
	{"ovnaction (network-controller-intent)", regexp.MustCompile(emcoDIGPath + `/network-controller-intent` + subtree)},
	{"hpa-plc (hpa-intents)", regexp.MustCompile(emcoDIGPath + `/hpa-intents` + subtree)},
	{"dtc (traffic-group-intents)", regexp.MustCompile(emcoDIGPath + `/traffic-group-intents` + subtree)},
	{"sfc (network-chains)", regexp.MustCompile(emcoDIGPath + `/network-chains` + subtree)},
	{"sfc-client (sfc-clients)", regexp.MustCompile(emcoDIGPath + `/sfc-clients` + subtree)},
	{"workflow manager (temporal-workflow-intents)", regexp.MustCompile(emcoDIGPath + `/temporal-workflow-intents` + subtree)},
	{"tac (temporal-action-controller)", regexp.MustCompile(emcoDIGPath + `/temporal-action-controller` + subtree)},
	{"ca-certs", regexp.MustCompile(`^/v2/(projects|cluster-providers)/` + segment + `/ca-certs` + subtree)},
	{"clm GitOps (cluster-sync-objects)", regexp.MustCompile(`^/v2/cluster-providers/` + segment + `/cluster-sync-objects` + subtree)},
	{"ncm (clusters/{cluster}/stop)", regexp.MustCompile(`^/v2/cluster-providers/` + segment + `/clusters/` + segment + `/stop/?$`)},
}

// notFound answers a path no route serves: 501 naming the controller for
// an endpoint of an EMCO controller Argus does not implement, else 404.
func notFound(w http.ResponseWriter, r *http.Request) {
	for _, u := range unimplementedControllers {
		if u.path.MatchString(r.URL.Path) {
			http.Error(w, "EMCO's "+u.controller+" controller is not implemented by Argus, which serves the orchestrator "+
				"(placement, generic action controller, dependencies), clm, ncm networks and dcm logical clouds; see docs/emco-compatibility.md",
				http.StatusNotImplemented)
			return
		}
	}
	http.Error(w, "no such resource: "+r.URL.Path, http.StatusNotFound)
}
