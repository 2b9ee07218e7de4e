package client

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Ref names what a command is about: a deployment intent group
// (PROJECT/COMPOSITE-APP/VERSION/DIG) or a v1 instance (by its id).
type Ref struct {
	Project, CompositeApp, Version, DIG string
	// Instance is a v1 instance's id; the DIG fields are then empty.
	Instance string
}

// ParseRef reads PROJECT/COMPOSITE-APP/VERSION/DIG.
func ParseRef(s string) (Ref, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return Ref{}, fmt.Errorf("%q is not PROJECT/COMPOSITE-APP/VERSION/DIG", s)
	}
	for _, p := range parts {
		if p == "" {
			return Ref{}, fmt.Errorf("%q has an empty part; want PROJECT/COMPOSITE-APP/VERSION/DIG", s)
		}
	}
	return Ref{Project: parts[0], CompositeApp: parts[1], Version: parts[2], DIG: parts[3]}, nil
}

// InstanceRef names a v1 instance.
func InstanceRef(id string) (Ref, error) {
	if id == "" || strings.Contains(id, "/") {
		return Ref{}, errors.New("an instance id is a non-empty name without '/'")
	}
	return Ref{Instance: id}, nil
}

// IsInstance reports a v1 instance.
func (r Ref) IsInstance() bool { return r.Instance != "" }

// String is the name as the user gives it.
func (r Ref) String() string {
	if r.IsInstance() {
		return "instance " + r.Instance
	}
	return r.Project + "/" + r.CompositeApp + "/" + r.Version + "/" + r.DIG
}

// Path is the subject's API path: its status is Path()+"/status".
func (r Ref) Path() string {
	if r.IsInstance() {
		return "/v1/instance/" + url.PathEscape(r.Instance)
	}
	return "/v2/projects/" + url.PathEscape(r.Project) + "/composite-apps/" + url.PathEscape(r.CompositeApp) + "/" +
		url.PathEscape(r.Version) + "/deployment-intent-groups/" + url.PathEscape(r.DIG)
}
