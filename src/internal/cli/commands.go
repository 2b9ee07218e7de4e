package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/status"
)

func (a *app) historyCmd() *cobra.Command {
	var subj subject
	var f filters
	var output, since string
	cmd := &cobra.Command{
		Use:   "history REF",
		Short: "List how a deployment got where it is: actions, status and resource transitions, oldest first",
		Long: `history lists GET …/status/history of a DIG (PROJECT/COMPOSITE-APP/VERSION/DIG) or
a v1 instance (--instance ID): every user action, change of the context's
status or readiness, and resource transition, oldest first, times local.
--app, --cluster and --resource keep only resource entries that match; --since
(RFC 3339, or a duration such as 1h meaning that long ago) the recent ones.
-o json or yaml prints the API's answer.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeRef,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			ref, c, err := a.open(cmd, &subj, args)
			if err != nil {
				return err
			}
			q := f.query()
			if since != "" {
				if d, err := time.ParseDuration(since); err == nil {
					since = time.Now().Add(-d).UTC().Format(time.RFC3339)
				}
				q.Set("since", since)
			}
			entries, raw, err := c.History(cmd.Context(), ref, q)
			if err != nil {
				return err
			}
			if output != "table" {
				return printRaw(cmd.OutOrStdout(), raw, output)
			}
			printHistory(cmd.OutOrStdout(), entries, a.opts.Location)
			return nil
		},
	}
	subj.flags(cmd)
	f.flags(cmd)
	cmd.Flags().StringVar(&since, "since", "", "only entries at or after this time (RFC 3339) or this long ago (a duration: 30m)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json (the API's answer) or yaml")
	return cmd
}

func printHistory(w io.Writer, entries []history.Entry, loc *time.Location) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "No transitions recorded.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tWHAT\tCHANGE\tFROM → TO\tREASON")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.In(loc).Format(timeFormat), entryWhat(e), entryChange(e),
			side(e, e.From)+" → "+side(e, e.To), localTimes(e.Reason, loc))
	}
	_ = tw.Flush()
}

// entryWhat names what an entry is about.
func entryWhat(e history.Entry) string {
	if e.Resource == nil {
		return e.Kind
	}
	ns := ""
	if e.Resource.Namespace != "" {
		ns = e.Resource.Namespace + "/"
	}
	return fmt.Sprintf("%s %s%s (%s on %s+%s)", e.Resource.GVK.Kind, ns, e.Resource.Name, e.App, e.ClusterProvider, e.Cluster)
}

// entryChange badges an entry by what changed, as the console does.
func entryChange(e history.Entry) string {
	switch e.Kind {
	case history.KindAction:
		return "action " + e.To.State
	case history.KindStatus:
		switch {
		case e.From == nil:
			return "status"
		case e.From.Status != e.To.Status:
			return "status " + e.To.Status
		case e.To.Ready != nil && *e.To.Ready:
			return "became ready"
		}
		return "became not ready"
	case history.KindResource:
		switch {
		case e.From == nil:
			return "appeared"
		case e.To == nil:
			return "gone"
		case e.From.ReadyStatus != e.To.ReadyStatus:
			return "readiness"
		case e.From.ClusterStatus != e.To.ClusterStatus:
			return "presence"
		case e.From.RsyncStatus != e.To.RsyncStatus:
			return "rsync"
		}
		return "sync"
	}
	return e.Kind
}

func side(e history.Entry, s *history.State) string {
	if s == nil {
		return "—"
	}
	switch e.Kind {
	case history.KindAction:
		if s == e.From && e.To != nil && s.State == e.To.State {
			return "—" // the first action: nothing before it
		}
		return s.State
	case history.KindStatus:
		ready := s.Ready != nil && *s.Ready
		if ready {
			return s.Status + ", ready"
		}
		return s.Status + ", not ready"
	}
	var parts []string
	for _, p := range []string{s.RsyncStatus, s.ClusterStatus, s.ReadyStatus} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

func (a *app) clustersCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "List the clusters: connectivity, monitor, last seen, live contexts, the replica watching each",
		Long: `clusters lists GET /v2/overview/clusters: every cluster and v1 cloud region with its
connectivity, its monitor (Running, Silent, NotInstalled), when the monitor
was last seen, its live contexts, and which orchestrator replica watches it.
-o json or yaml prints the API's answer; -o wide adds the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			o, raw, err := c.Clusters(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				return printRaw(cmd.OutOrStdout(), raw, output)
			}
			printClusters(cmd.OutOrStdout(), o, output == "wide", a.opts.Location)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide, json (the API's answer) or yaml")
	return cmd
}

func printClusters(w io.Writer, o status.ClusterOverview, wide bool, loc *time.Location) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "CLUSTER\tCONNECTIVITY\tMONITOR\tLAST SEEN\tCONTEXTS\tWATCHER"
	if wide {
		head += "\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, c := range o.Clusters {
		watcher := or(c.WatcherOwner, "none")
		if c.WatcherOwner != "" && c.WatcherOwner == o.Replica {
			watcher += " (this replica)"
		}
		line := fmt.Sprintf("%s+%s\t%s\t%s\t%s\t%d\t%s", c.ClusterProvider, c.Cluster, c.Connectivity, c.Monitor,
			or(localTimes(c.LastSeen, loc), "—"), c.Contexts, watcher)
		if wide {
			line += "\t" + localTimes(c.Reason, loc)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

func (a *app) syncCmd() *cobra.Command {
	var subj subject
	var f filters
	var output string
	cmd := &cobra.Command{
		Use:   "sync REF",
		Short: "Re-apply what drifted (OutOfSync or Missing) in a deployment, and list it",
		Long: `sync POSTs …/sync of a DIG (PROJECT/COMPOSITE-APP/VERSION/DIG) or a v1 instance
(--instance ID): the orchestrator re-applies every Applied resource that is
OutOfSync or Missing on its cluster (narrowed by --app, --cluster, --resource)
and answers with what it re-applies; this lists it. Follow it with
argus wait REF --for synced. -o json or yaml prints the API's answer.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeRef,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			ref, c, err := a.open(cmd, &subj, args)
			if err != nil {
				return err
			}
			res, raw, err := c.Sync(cmd.Context(), ref, f.query())
			if err != nil {
				return err
			}
			if output != "table" {
				return printRaw(cmd.OutOrStdout(), raw, output)
			}
			w := cmd.OutOrStdout()
			if len(res.Resources) == 0 {
				fmt.Fprintf(w, "Nothing drifted in %s (context %s): nothing to re-apply.\n", ref, res.Instance)
				return nil
			}
			fmt.Fprintf(w, "Re-applying %d resources of %s (context %s):\n", len(res.Resources), ref, res.Instance)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  RESOURCE\tWHERE\tSYNC\tREASON")
			for _, r := range res.Resources {
				fmt.Fprintf(tw, "  %s/%s\t%s on %s+%s\t%s\t%s\n", r.GVK.Kind, r.Name, r.App, r.ClusterProvider, r.Cluster, r.SyncStatus, r.SyncReason)
			}
			return tw.Flush()
		},
	}
	subj.flags(cmd)
	f.flags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json (the API's answer) or yaml")
	return cmd
}

func (a *app) listCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every deployment intent group and v1 instance with its state and readiness",
		Long: `list prints GET /v2/overview: every DIG (as the REF the other commands take) and
v1 instance, its lifecycle state, readiness and ready/total resources.
-o json or yaml prints the API's answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			o, raw, err := c.Overview(cmd.Context())
			if err != nil {
				return err
			}
			if output != "table" {
				return printRaw(cmd.OutOrStdout(), raw, output)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REF\tSTATE\tSTATUS\tREADY\tRESOURCES")
			for _, s := range append(append([]status.Summary{}, o.DeploymentIntentGroups...), o.Instances...) {
				ref := s.Project + "/" + s.CompositeApp + "/" + s.Version + "/" + s.Name
				if s.Kind == "instance" {
					ref = "--instance " + s.ID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\n", ref, or(s.State, "—"), or(s.Status, "—"), or(s.ReadyStatus, "—"), s.ReadyCount, s.Total)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json (the API's answer) or yaml")
	return cmd
}
