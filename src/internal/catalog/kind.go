package catalog

import (
	"fmt"
	"strings"
)

// Kind describes one resource type of the catalogue.
type Kind struct {
	// Name is the singular, human name ("project", "composite app"); with
	// spaces replaced it is also the key field of this level.
	Name string
	// Collection is the MongoDB collection holding the kind's objects.
	Collection string
	// Parent is the kind this one lives under; nil for top-level kinds.
	Parent *Kind
}

// Field is the document field holding this level's name.
func (k *Kind) Field() string { return strings.ReplaceAll(k.Name, " ", "") }

// KeyFields lists the fields identifying an object, outermost first.
func (k *Kind) KeyFields() []string {
	if k.Parent == nil {
		return []string{k.Field()}
	}
	return append(k.Parent.KeyFields(), k.Field())
}

// Key identifies an object by the values of its kind's key fields.
type Key []string

// Parent drops the object's own name.
func (k Key) Parent() Key { return k[:len(k)-1] }

// Name is the object's own name.
func (k Key) Name() string { return k[len(k)-1] }

// describe renders a key for messages: project "p1", composite app "ca".
func (k *Kind) describe(key Key) string {
	var parts []string
	for kind, i := k, len(key)-1; kind != nil && i >= 0; kind, i = kind.Parent, i-1 {
		parts = append([]string{fmt.Sprintf("%s %q", kind.Name, key[i])}, parts...)
	}
	return strings.Join(parts, ", ")
}

// The kinds. Later kinds hang below these.
var (
	Projects = &Kind{Name: "project", Collection: "projects"}
)

// ProjectSpec is empty: an EMCO project is metadata only.
type ProjectSpec struct{}
