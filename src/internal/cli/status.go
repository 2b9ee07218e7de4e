package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/argus-mc/argus/src/internal/client"
	"github.com/argus-mc/argus/src/internal/status"
)

func (a *app) statusCmd() *cobra.Command {
	var subj subject
	var f filters
	var output string
	cmd := &cobra.Command{
		Use:   "status REF",
		Short: "Show a deployment's status: what is wrong first, then apps → clusters → resources (pods included) as a tree",
		Long: `status shows a deployment intent group (PROJECT/COMPOSITE-APP/VERSION/DIG) or a v1
instance (--instance ID): its state, readiness and sync, what is not ready or
not synced (worst first), then every app, cluster and resource as a tree, a
Pod under its ReplicaSet under its Deployment.

-o json prints the API's answer as it came: for a DIG
GET …/status?type=cluster&output=all (with --app, --cluster, --resource),
for an instance GET /v1/instance/ID/status. -o yaml is the same in YAML;
-o wide adds the rsync and cluster status of each resource.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeRef,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "tree", "wide", "json", "yaml"); err != nil {
				return err
			}
			ref, c, err := a.open(cmd, &subj, args)
			if err != nil {
				return err
			}
			v, raw, err := a.view(cmd.Context(), c, ref, f)
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				return printRaw(cmd.OutOrStdout(), raw, output)
			}
			a.printStatus(cmd.OutOrStdout(), v, output == "wide")
			return nil
		},
	}
	subj.flags(cmd)
	f.flags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "tree", "tree, wide, json (the API's answer) or yaml")
	return cmd
}

// statusView is a status reduced to what status prints.
type statusView struct {
	name, state, status, context string
	ready                        bool
	readyCounts, syncCounts      map[string]int
	apps                         []appView
}

type appView struct {
	name     string
	ready    bool
	clusters []clusterView
}

type clusterView struct {
	name, connectivity, monitor, why string
	ready                            bool
	resources                        []*node
}

// view reads the subject's status.
func (a *app) view(ctx context.Context, c *client.Client, ref client.Ref, f filters) (statusView, []byte, error) {
	if ref.IsInstance() {
		if len(f.query()) > 0 {
			return statusView{}, nil, fmt.Errorf("--app, --cluster and --resource narrow a DIG's status, not an instance's")
		}
		st, raw, err := c.InstanceStatus(ctx, ref)
		return instanceView(ref, st), raw, err
	}
	q := f.query()
	q.Set("type", status.TypeCluster)
	q.Set("output", status.OutputAll)
	st, raw, err := c.DIGStatus(ctx, ref, q)
	return digView(ref, st), raw, err
}

func digView(ref client.Ref, st status.Response) statusView {
	v := statusView{name: ref.String(), status: st.Status, context: st.States.StatusContextID,
		ready: st.Ready != nil && *st.Ready, readyCounts: st.ReadyStatus, syncCounts: syncCountsOf(st)}
	if n := len(st.State.Actions); n > 0 {
		v.state = st.State.Actions[n-1].State
	}
	for _, ap := range st.Apps {
		av := appView{name: ap.Name, ready: ap.Ready != nil && *ap.Ready}
		for _, cl := range ap.Clusters {
			cv := clusterView{name: cl.ClusterProvider + "+" + cl.Cluster, connectivity: cl.Connectivity, monitor: cl.Monitor,
				ready: cl.Ready != nil && *cl.Ready}
			var nodes []*node
			for _, r := range cl.Resources {
				n := &node{kind: r.GVK.Kind, name: r.Name, namespace: r.Namespace, resourceGroup: r.GVK.Group, version: r.GVK.Version,
					ready: r.ReadyStatus, reason: r.Reason, rsync: r.RsyncStatus, clusterStatus: r.ClusterStatus, owners: r.Owners}
				n.sync, n.reason = syncOf(r, n.reason)
				nodes = append(nodes, n)
			}
			cv.why = clusterWhy(cv, nodes)
			cv.resources = clusterTree(nodes)
			av.clusters = append(av.clusters, cv)
		}
		v.apps = append(v.apps, av)
	}
	return v
}

func instanceView(ref client.Ref, st status.InstanceStatus) statusView {
	v := statusView{name: ref.String(), ready: st.Ready, readyCounts: map[string]int{}, context: ref.Instance, syncCounts: st.SyncCounts}
	cv := clusterView{name: st.Request.CloudRegion, ready: st.Ready}
	var nodes []*node
	for _, r := range st.ResourcesStatus {
		v.readyCounts[r.ReadyStatus]++
		nodes = append(nodes, &node{kind: r.GVK.Kind, name: r.Name, namespace: namespaceOf(r.Status), resourceGroup: r.GVK.Group,
			version: r.GVK.Version, ready: r.ReadyStatus, reason: r.Reason, sync: r.SyncStatus, owners: ownersFromObject(r.Status)})
	}
	cv.why = clusterWhy(cv, nodes)
	cv.resources = clusterTree(nodes)
	v.apps = []appView{{name: st.Request.RBName, ready: st.Ready, clusters: []clusterView{cv}}}
	return v
}

// clusterWhy is the one reason a cluster's resources share when the
// cluster cannot be believed (its monitor silent, it unreachable): said
// once, on the cluster's line.
func clusterWhy(cv clusterView, nodes []*node) string {
	if (cv.connectivity == "" || cv.connectivity == "Available") && (cv.monitor == "" || cv.monitor == "Running") {
		return ""
	}
	for _, n := range nodes {
		if n.ready == "Unknown" && n.reason != "" {
			why := n.reason
			for _, m := range nodes {
				if m.reason == why {
					m.reason = ""
				}
			}
			return why
		}
	}
	return "connectivity " + cv.connectivity + ", monitor " + cv.monitor
}

func (a *app) printStatus(w io.Writer, v statusView, wide bool) {
	loc := a.opts.Location
	fmt.Fprintf(w, "Name:     %s\n", v.name)
	if v.state != "" || v.status != "" {
		fmt.Fprintf(w, "State:    %s (context %s, status %s)\n", or(v.state, "—"), or(v.context, "none"), or(v.status, "none"))
	}
	total, ready := 0, v.readyCounts["Ready"]
	for _, n := range v.readyCounts {
		total += n
	}
	fmt.Fprintf(w, "Ready:    %v — %d of %d resources Ready%s\n", v.ready, ready, total, countsText(v.readyCounts, "Ready"))
	if len(v.syncCounts) > 0 {
		fmt.Fprintf(w, "Sync:     %s\n", strings.TrimPrefix(countsText(v.syncCounts, ""), " "))
	}
	if bad := wrongOf(v); len(bad) > 0 {
		fmt.Fprintln(w, "\nNot ready or not synced, worst first:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, b := range bad {
			fmt.Fprintf(tw, "  %s\t%s\t%s on %s\t%s\n", or(b.n.ready, "—"), b.n.kind+"/"+b.n.name, b.app, b.cluster, localTimes(or(b.n.reason, b.why), loc))
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "APP / CLUSTER / RESOURCE\tNAMESPACE\tREADY\tSYNC\tREASON"
	if wide {
		head = "APP / CLUSTER / RESOURCE\tNAMESPACE\tREADY\tSYNC\tRSYNC\tCLUSTER-STATUS\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, ap := range v.apps {
		row(tw, wide, ap.name, "", readyWord(ap.ready), "", "", "", "")
		for i, cl := range ap.clusters {
			last := i == len(ap.clusters)-1
			row(tw, wide, branch("", last)+cl.name, "", readyWord(cl.ready), "", "", "", localTimes(cl.why, loc))
			printNodes(tw, wide, indent("", last), cl.resources, loc)
		}
	}
	_ = tw.Flush()
}

func printNodes(tw io.Writer, wide bool, prefix string, l []*node, loc *time.Location) {
	for i, n := range l {
		last := i == len(l)-1
		row(tw, wide, prefix+branch("", last)+n.kind+"/"+n.name, n.namespace, n.ready, n.sync, n.rsync, n.clusterStatus, localTimes(n.reason, loc))
		printNodes(tw, wide, prefix+indent("", last), n.children, loc)
	}
}

func row(tw io.Writer, wide bool, what, ns, ready, sync, rsync, cluster, reason string) {
	if wide {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", what, ns, ready, sync, rsync, cluster, reason)
		return
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", what, ns, ready, sync, reason)
}

func branch(prefix string, last bool) string {
	if last {
		return prefix + "└─ "
	}
	return prefix + "├─ "
}

func indent(prefix string, last bool) string {
	if last {
		return prefix + "   "
	}
	return prefix + "│  "
}

func readyWord(ready bool) string {
	if ready {
		return "Ready"
	}
	return "NotReady"
}

// bad is one resource that is not Ready or not Synced, where it is.
type bad struct {
	n                 *node
	app, cluster, why string
	// derived: something it owns is wrong too (a Deployment Failed because
	// its Pod is): the cause is listed before it.
	derived bool
}

// wrongOf lists what is wrong, causes first: by severity, then a resource
// whose trouble comes from one it owns after every cause, then by app,
// cluster, kind and name.
func wrongOf(v statusView) []bad {
	var out []bad
	var walk func(app string, cl clusterView, l []*node) bool
	walk = func(app string, cl clusterView, l []*node) bool {
		found := false
		for _, n := range l {
			below := walk(app, cl, n.children)
			if !n.virtual && wrong(n.ready, n.sync) {
				out = append(out, bad{n: n, app: app, cluster: cl.name, why: cl.why, derived: below})
				below = true
			}
			found = found || below
		}
		return found
	}
	for _, ap := range v.apps {
		for _, cl := range ap.clusters {
			walk(ap.name, cl, cl.resources)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].derived != out[j].derived {
			return !out[i].derived
		}
		si, sj := severity(out[i].n.ready, out[i].n.sync), severity(out[j].n.ready, out[j].n.sync)
		if si != sj {
			return si < sj
		}
		return out[i].app+out[i].cluster+out[i].n.kind+out[i].n.name < out[j].app+out[j].cluster+out[j].n.kind+out[j].n.name
	})
	return out
}

// countsText renders counts as " (Failed 1, Pending 2)", leaving out skip.
func countsText(counts map[string]int, skip string) string {
	var keys []string
	for k, n := range counts {
		if k != skip && n > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	sort.Slice(keys, func(i, j int) bool {
		return severity(keys[i], keys[i]) < severity(keys[j], keys[j]) || keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	if skip == "" {
		return " " + strings.Join(parts, ", ")
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// namespaceOf reads metadata.namespace from an object.
func namespaceOf(obj []byte) string {
	var o struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(obj, &o)
	return o.Metadata.Namespace
}

func checkOutput(o string, allowed ...string) error {
	for _, a := range allowed {
		if o == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q is not one of %s", o, strings.Join(allowed, ", "))
}

// syncOf is a resource's sync state, and its reason joined with the
// sync's reason.
func syncOf(r status.Resource, reason string) (string, string) {
	if r.SyncReason != "" && r.SyncReason != reason {
		reason = strings.TrimPrefix(reason+"; "+r.SyncReason, "; ")
	}
	return r.SyncStatus, reason
}

// syncCountsOf is an answer's sync counts.
func syncCountsOf(st status.Response) map[string]int { return st.SyncCounts }
