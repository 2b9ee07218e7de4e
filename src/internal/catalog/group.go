package catalog

import (
	"slices"
	"strings"
)

// GroupKind is what a group's actions and status are about.
type GroupKind string

// Group kinds, as they prefix a group id.
const (
	GroupDIG          GroupKind = "dig"      // a deployment intent group: project, composite app, version, DIG
	GroupInstance     GroupKind = "instance" // a v1 instance: its id
	GroupLogicalCloud GroupKind = "lc"       // a logical cloud: project, cloud
	GroupCluster      GroupKind = "cluster"  // a cluster's network intents: provider, cluster
)

// Group identifies the subject of a lifecycle, of rsync's actions and of
// change routing: a DIG, a v1 instance, a logical cloud or a cluster's
// network intents. Its string form ("dig:p/ca/v1/dig", "instance:id",
// "lc:p/cloud", "cluster:provider+name") keys lifecycles in MongoDB and
// groups in etcd; ParseGroup reads it back.
type Group struct {
	Kind GroupKind
	// Key names the subject within its kind; its length is fixed by Kind
	// (4, 1, 2 and 2 fields).
	Key Key
}

// String is the group's id.
func (g Group) String() string {
	sep := "/"
	if g.Kind == GroupCluster {
		sep = "+"
	}
	return string(g.Kind) + ":" + strings.Join(g.Key, sep)
}

// groupFields is the number of key fields of each kind.
var groupFields = map[GroupKind]int{GroupDIG: 4, GroupInstance: 1, GroupLogicalCloud: 2, GroupCluster: 2}

// ParseGroup reads a group id; ok is false for anything that is not one
// of the four forms with every field present.
func ParseGroup(id string) (g Group, ok bool) {
	kind, rest, found := strings.Cut(id, ":")
	n, known := groupFields[GroupKind(kind)]
	if !found || !known || rest == "" {
		return Group{}, false
	}
	g.Kind = GroupKind(kind)
	switch {
	case n == 1:
		g.Key = Key{rest}
	case g.Kind == GroupCluster:
		g.Key = Key(strings.SplitN(rest, "+", 2))
	default:
		g.Key = Key(strings.Split(rest, "/"))
	}
	if len(g.Key) != n || slices.Contains(g.Key, "") {
		return Group{}, false
	}
	return g, true
}

// DIGGroup is a deployment intent group's group id.
func DIGGroup(dig Key) string { return Group{Kind: GroupDIG, Key: dig}.String() }

// LogicalCloudGroup is a logical cloud's group id.
func LogicalCloudGroup(project, cloud string) string {
	return Group{Kind: GroupLogicalCloud, Key: Key{project, cloud}}.String()
}

// ClusterGroup is the group id of a cluster's network intents.
func ClusterGroup(provider, cluster string) string {
	return Group{Kind: GroupCluster, Key: Key{provider, cluster}}.String()
}

// InstanceGroup is a v1 instance's group id.
func InstanceGroup(id string) string { return Group{Kind: GroupInstance, Key: Key{id}}.String() }
