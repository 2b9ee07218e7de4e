package catalog

import (
	"regexp"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Metadata is the EMCO metadata block every v2 object carries.
type Metadata struct {
	Name        string `json:"name" bson:"name"`
	Description string `json:"description" bson:"description"`
	UserData1   string `json:"userData1" bson:"userData1"`
	UserData2   string `json:"userData2" bson:"userData2"`
}

// Object is a v2 resource: metadata plus a kind-specific spec.
type Object[S any] struct {
	Metadata Metadata `json:"metadata" bson:"metadata"`
	Spec     S        `json:"spec,omitzero" bson:"spec"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidateName checks a resource name against the rule every name follows.
func ValidateName(what, name string) error {
	if name == "" {
		return errdefs.Invalid("%s name is missing", what)
	}
	if !nameRE.MatchString(name) {
		return errdefs.Invalid("%s name %q is invalid: it must match %s", what, name, nameRE.String())
	}
	return nil
}
