package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/argus-mc/argus/src/internal/client"
	"github.com/argus-mc/argus/src/internal/status"
)

func (a *app) watchCmd() *cobra.Command {
	var subj subject
	var f filters
	var output string
	cmd := &cobra.Command{
		Use:   "watch REF",
		Short: "Follow a deployment's status as it changes (the API's Server-Sent Events stream)",
		Long: `watch follows GET …/status?watch=true of a DIG (PROJECT/COMPOSITE-APP/VERSION/DIG)
or a v1 instance (--instance ID): a line for the status when it starts, then a
line for each resource that changes and for each change of readiness, as
they happen. A broken stream is reopened (resuming after the last event) until
Ctrl-C. -o json prints each event as one JSON object: {"event", "id", "data"}.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeRef,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ref, c, err := a.open(cmd, &subj, args)
			if err != nil {
				return err
			}
			q, err := streamQuery(ref, f)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			p := &eventPrinter{w: w, loc: a.opts.Location, name: ref.String()}
			return c.Watch(cmd.Context(), ref, q, func(e client.Event) error {
				if output == "json" {
					return printEventJSON(w, e)
				}
				p.print(e)
				return nil
			})
		},
	}
	subj.flags(cmd)
	f.flags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json (one event a line)")
	return cmd
}

// streamQuery is the query of a status stream: readiness (type=cluster),
// counts only (each change names its resources), no history events.
func streamQuery(ref client.Ref, f filters) (url.Values, error) {
	q := f.query()
	if ref.IsInstance() {
		if len(q) > 0 {
			return nil, fmt.Errorf("--app, --cluster and --resource narrow a DIG's status, not an instance's")
		}
		return url.Values{"history": {"false"}}, nil
	}
	q.Set("type", status.TypeCluster)
	q.Set("output", status.OutputSummary)
	q.Set("history", "false")
	return q, nil
}

func printEventJSON(w io.Writer, e client.Event) error {
	data := json.RawMessage(e.Data)
	if len(data) == 0 || !json.Valid(data) {
		data = json.RawMessage("null")
	}
	line, err := json.Marshal(struct {
		Event string          `json:"event"`
		ID    int64           `json:"id,omitempty"`
		Data  json.RawMessage `json:"data"`
	}{e.Name, e.ID, data})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// changeEvent is a change event's data: a DIG's status answer (an
// instance's envelope carries only ready) and what changed.
type changeEvent struct {
	status.Response
	Changes struct {
		Created  []changeEntry `json:"created"`
		Deleted  []changeEntry `json:"deleted"`
		Modified []changeEntry `json:"modified"`
	} `json:"resource-changes"`
}

// changeEntry is one resource of a change (notifications' entries).
type changeEntry struct {
	App             string     `json:"app"`
	ClusterProvider string     `json:"cluster-provider"`
	Cluster         string     `json:"cluster"`
	GVK             status.GVK `json:"GVK"`
	Name            string     `json:"name"`
	Namespace       string     `json:"namespace"`
	ReadyStatus     string     `json:"ready-status"`
	Reason          string     `json:"reason"`
	SyncStatus      string     `json:"syncStatus"`
	Key             string     `json:"key"`
}

// eventPrinter prints a stream's events as lines, one a change.
type eventPrinter struct {
	w     io.Writer
	loc   *time.Location
	name  string
	ready *bool
}

func (p *eventPrinter) line(format string, args ...any) {
	fmt.Fprintf(p.w, "%s  %s\n", time.Now().In(p.loc).Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (p *eventPrinter) print(e client.Event) {
	switch e.Name {
	case client.Reconnected:
		p.line("the stream broke and is open again; its new snapshot follows")
	case "snapshot":
		p.snapshot(e.Data)
	case "change":
		var ch changeEvent
		if err := json.Unmarshal(e.Data, &ch); err != nil {
			p.line("a change event that does not decode: %v", err)
			return
		}
		if ch.Ready != nil && (p.ready == nil || *p.ready != *ch.Ready) {
			p.line("%s: ready %v → %v", p.name, p.readyText(), *ch.Ready)
			p.ready = ch.Ready
		}
		for _, c := range ch.Changes.Created {
			p.entry("created", c)
		}
		for _, c := range ch.Changes.Modified {
			p.entry("modified", c)
		}
		for _, c := range ch.Changes.Deleted {
			p.entry("deleted", c)
		}
	case "error":
		p.line("the server ended the stream: %s", strings.TrimSpace(string(e.Data)))
	}
}

func (p *eventPrinter) readyText() string {
	if p.ready == nil {
		return "?"
	}
	return fmt.Sprint(*p.ready)
}

// snapshot prints the status a stream starts with: a DIG's answer or an
// instance's.
func (p *eventPrinter) snapshot(data []byte) {
	var st struct {
		Ready           *bool                   `json:"ready"`
		ReadyStatus     map[string]int          `json:"ready-status"`
		ResourcesStatus []status.ResourceStatus `json:"resourcesStatus"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		p.line("a snapshot that does not decode: %v", err)
		return
	}
	counts := st.ReadyStatus
	if st.ResourcesStatus != nil {
		counts = map[string]int{}
		for _, r := range st.ResourcesStatus {
			counts[r.ReadyStatus]++
		}
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	p.ready = st.Ready
	p.line("%s: ready %s — %d of %d resources Ready%s", p.name, p.readyText(), counts["Ready"], total, countsText(counts, "Ready"))
}

func (p *eventPrinter) entry(what string, c changeEntry) {
	if c.Name == "" {
		p.line("%-8s  %s", what, c.Key)
		return
	}
	where := c.App
	if c.Cluster != "" {
		where += " on " + c.ClusterProvider + "+" + c.Cluster
	}
	ns := ""
	if c.Namespace != "" {
		ns = c.Namespace + "/"
	}
	state := c.ReadyStatus
	if c.SyncStatus != "" && c.SyncStatus != "Synced" {
		state += ", " + c.SyncStatus
	}
	reason := ""
	if c.Reason != "" {
		reason = "  " + localTimes(c.Reason, p.loc)
	}
	p.line("%-8s  %s %s%s  %s  %s%s", what, c.GVK.Kind, ns, c.Name, where, state, reason)
}
