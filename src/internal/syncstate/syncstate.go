package syncstate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"sort"
	"strconv"
	"strings"
)

// FieldManager is the server-side apply field manager of every object
// Argus applies.
const FieldManager = "argus"

// Sync states of a resource (desired against live, as Argo CD has them).
const (
	Synced    = "Synced"
	OutOfSync = "OutOfSync"
	Missing   = "Missing"
	// Unknown: the cluster cannot be believed now (unreachable, its monitor
	// silent, no bundle yet), so nothing is decided.
	Unknown = "Unknown"
)

// States lists the sync states, for validation and documentation.
var States = []string{Synced, OutOfSync, Missing, Unknown}

// Valid reports whether s is a sync state.
func Valid(s string) bool {
	for _, v := range States {
		if v == s {
			return true
		}
	}
	return false
}

// Bounds on what Hash walks: a managed field set comes from a cluster, so
// its depth and size are untrusted.
const (
	maxDepth = 64
	maxNodes = 100000
)

// Hash returns the hash of obj's values at the fields its Apply entry of
// FieldManager owns, the set itself included, as 32 hex digits; "" when no
// such entry exists or it cannot be read. obj is an unstructured object
// (JSON decoded, as client-go's unstructured decoder makes it) with its
// managedFields; it is not changed. A Secret's data and stringData values
// are left out (their keys are not): the hash travels in bundles that
// people who may not read the Secret can read, and a value changed by
// anyone else moves its field away from Argus anyway.
func Hash(obj map[string]any) string {
	entry := applyEntry(obj)
	if entry == nil {
		return ""
	}
	fields, ok := entry["fieldsV1"].(map[string]any)
	if !ok {
		return ""
	}
	apiVersion, _ := obj["apiVersion"].(string)
	if v, _ := entry["apiVersion"].(string); v != "" && v != apiVersion {
		// The set names paths of another version's schema: the values
		// cannot be found by them. Nothing is said rather than a false drift.
		return ""
	}
	kind, _ := obj["kind"].(string)
	w := &walker{h: sha256.New(), secret: kind == "Secret" && !strings.Contains(apiVersion, "/")}
	w.line("apiVersion", apiVersion)
	if !w.walk(fields, obj, "", 0) {
		return ""
	}
	sum := w.h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// applyEntry finds the managedFields entry of FieldManager with operation
// Apply on the main resource.
func applyEntry(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	list, _ := meta["managedFields"].([]any)
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if m["manager"] == FieldManager && m["operation"] == "Apply" && (m["subresource"] == nil || m["subresource"] == "") {
			return m
		}
	}
	return nil
}

type walker struct {
	h      hash.Hash
	nodes  int
	secret bool
}

func (w *walker) line(path, value string) {
	w.h.Write([]byte(strconv.Quote(path)))
	w.h.Write([]byte{'='})
	w.h.Write([]byte(value))
	w.h.Write([]byte{'\n'})
}

// walk hashes the set's members below val, in key order. A member without
// children is a leaf (a scalar, or a list or map owned whole): its value
// counts. A member with children counts for its presence, and its children
// as they say; "." marks a map or list owned for its own sake, whose other
// entries may belong to others, so only its presence counts.
func (w *walker) walk(set map[string]any, val any, path string, depth int) bool {
	if depth > maxDepth {
		return false
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		if k != "." {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if w.nodes++; w.nodes > maxNodes {
			return false
		}
		child, ok := set[k].(map[string]any)
		if !ok {
			return false
		}
		p := path + "/" + k
		v, found := descend(val, k)
		switch {
		case !found:
			w.line(p, "<absent>")
		case len(child) == 0 && w.redacted(p):
			w.line(p, "<redacted>")
		case len(child) == 0:
			data, err := json.Marshal(v)
			if err != nil {
				return false
			}
			w.line(p, string(data))
		default:
			w.line(p, "<present>")
			if !w.walk(child, v, p, depth+1) {
				return false
			}
		}
	}
	return true
}

// redacted: a Secret's values.
func (w *walker) redacted(path string) bool {
	return w.secret && (strings.HasPrefix(path, "/f:data/") || strings.HasPrefix(path, "/f:stringData/"))
}

// descend follows one path element of a managed field set into a value:
// "f:<name>" a map's field, "k:<json object>" the list element whose
// fields have those values, "v:<json>" the set element of that value,
// "i:<n>" a list's element at an index.
func descend(val any, elem string) (any, bool) {
	prefix, rest, ok := strings.Cut(elem, ":")
	if !ok {
		return nil, false
	}
	switch prefix {
	case "f":
		m, ok := val.(map[string]any)
		if !ok {
			return nil, false
		}
		v, found := m[rest]
		return v, found
	case "k":
		var key map[string]any
		if json.Unmarshal([]byte(rest), &key) != nil {
			return nil, false
		}
		list, _ := val.([]any)
		for _, e := range list {
			if m, ok := e.(map[string]any); ok && matches(m, key) {
				return e, true
			}
		}
	case "v":
		var want any
		if json.Unmarshal([]byte(rest), &want) != nil {
			return nil, false
		}
		list, _ := val.([]any)
		for _, e := range list {
			if same(e, want) {
				return e, true
			}
		}
	case "i":
		i, err := strconv.Atoi(rest)
		list, _ := val.([]any)
		if err == nil && i >= 0 && i < len(list) {
			return list[i], true
		}
	}
	return nil, false
}

func matches(m, key map[string]any) bool {
	for k, v := range key {
		got, ok := m[k]
		if !ok || !same(got, v) {
			return false
		}
	}
	return true
}

// same compares two decoded JSON values by their canonical encoding, so a
// number decoded as int64 equals the same number decoded as float64.
func same(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
