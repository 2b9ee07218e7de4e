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
	// Own lists this level's key fields when there is more than the name
	// (a composite app is keyed by name and version); nil means [Field()].
	Own []string
	// Cascade makes objects of this kind go with their parent instead of
	// keeping it from being deleted (subscriptions belong to what they watch).
	Cascade bool
	// Queried are the fields besides the key that queries filter on
	// (CountWhere): each gets an index.
	Queried []string
}

// Field is the document field holding this level's name.
func (k *Kind) Field() string { return strings.ReplaceAll(k.Name, " ", "") }

// OwnFields are the key fields this level adds.
func (k *Kind) OwnFields() []string {
	if k.Own != nil {
		return k.Own
	}
	return []string{k.Field()}
}

// KeyFields lists the fields identifying an object, outermost first.
func (k *Kind) KeyFields() []string {
	if k.Parent == nil {
		return append([]string{}, k.OwnFields()...)
	}
	return append(k.Parent.KeyFields(), k.OwnFields()...)
}

// Key identifies an object by the values of its kind's key fields.
type Key []string

// ParentKey is the part of key that identifies the parent object.
func (k *Kind) ParentKey(key Key) Key { return key[:len(key)-len(k.OwnFields())] }

// Name is the object's own name.
func (k Key) Name() string { return k[len(k)-1] }

// describe renders a key for messages: project "p1", composite app "ca" version "v1".
func (k *Kind) describe(key Key) string {
	var parts []string
	i := len(key)
	for kind := k; kind != nil && i > 0; kind = kind.Parent {
		own := kind.OwnFields()
		start := max(i-len(own), 0)
		vals := key[start:i]
		part := fmt.Sprintf("%s %q", kind.Name, vals[0])
		for j := 1; j < len(vals); j++ {
			part += fmt.Sprintf(" %s %q", own[j], vals[j])
		}
		parts = append([]string{part}, parts...)
		i = start
	}
	return strings.Join(parts, ", ")
}
