package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/argus-mc/argus/src/internal/client"
)

// Exit codes.
const (
	// ExitOK: done (for wait: the condition holds).
	ExitOK = 0
	// ExitNotReached: wait's condition did not hold within its timeout.
	ExitNotReached = 1
	// ExitError: anything else (usage, an unreachable server, an unknown
	// deployment, a refused token).
	ExitError = 2
)

// Options is what the command runs with: its arguments and surroundings.
type Options struct {
	Args           []string
	Stdout, Stderr io.Writer
	// Getenv reads the environment (ARGUS_SERVER, ARGUS_TOKEN, …); nil
	// reads none.
	Getenv func(string) string
	// Location shows times; nil means time.Local.
	Location *time.Location
}

// notReached is wait's timeout: exit 1, with why.
type notReached struct{ why string }

func (e notReached) Error() string { return e.why }

// Run runs the argus command until it ends or ctx does, and returns its
// exit code.
func Run(ctx context.Context, opts Options) int {
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	a := &app{opts: opts}
	root := a.root()
	root.SetArgs(opts.Args)
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	err := root.ExecuteContext(ctx)
	var nr notReached
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &nr):
		fmt.Fprintln(opts.Stderr, "argus:", err)
		return ExitNotReached
	default:
		fmt.Fprintln(opts.Stderr, "argus:", err)
		return ExitError
	}
}

// app holds what every command shares.
type app struct {
	opts Options
	conn settings
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "argus",
		Short: "Argus's command-line client: status, watch, wait, history, clusters and sync of deployments",
		Long: `argus asks an Argus orchestrator what state a deployment is in, everywhere.

A deployment intent group is named PROJECT/COMPOSITE-APP/VERSION/DIG; a v1
(k8splugin) instance by --instance ID. The orchestrator is --server,
ARGUS_SERVER or server: in the config file (flags win over the environment,
which wins over the file); its token --token/--token-file, ARGUS_TOKEN or
ARGUS_TOKEN_FILE, or token:/token-file: in the file.

Exit codes: 0 done; 1 wait's condition did not hold in time; 2 any other
error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	connectionFlags(root.PersistentFlags(), &a.conn)
	root.AddCommand(a.statusCmd(), a.watchCmd(), a.waitCmd(), a.historyCmd(), a.clustersCmd(), a.syncCmd(), a.listCmd())
	return root
}

// client builds the API client from the resolved settings.
func (a *app) client(cmd *cobra.Command) (*client.Client, error) {
	opts, err := a.conn.resolve(cmd.Flags(), a.opts.Getenv)
	if err != nil {
		return nil, err
	}
	return client.New(opts)
}

// open reads a command's subject and makes its client, the start every
// command about one deployment shares.
func (a *app) open(cmd *cobra.Command, subj *subject, args []string) (client.Ref, *client.Client, error) {
	ref, err := subj.ref(args)
	if err != nil {
		return client.Ref{}, nil, err
	}
	c, err := a.client(cmd)
	return ref, c, err
}

// subject is a command's REF argument or --instance flag.
type subject struct {
	instance string
}

func (s *subject) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.instance, "instance", "", "a v1 (k8splugin) instance id instead of a DIG")
}

// ref reads the subject: one REF, or --instance and none.
func (s *subject) ref(args []string) (client.Ref, error) {
	switch {
	case s.instance != "" && len(args) > 0:
		return client.Ref{}, errors.New("give a DIG (PROJECT/COMPOSITE-APP/VERSION/DIG) or --instance ID, not both")
	case s.instance != "":
		return client.InstanceRef(s.instance)
	case len(args) == 1:
		return client.ParseRef(args[0])
	}
	return client.Ref{}, errors.New("name a deployment intent group (PROJECT/COMPOSITE-APP/VERSION/DIG) or --instance ID")
}

// filters are --app, --cluster and --resource, as the API's query.
type filters struct {
	apps, clusters, resources []string
}

func (f *filters) flags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.apps, "app", nil, "only this app (repeatable)")
	cmd.Flags().StringArrayVar(&f.clusters, "cluster", nil, "only this cluster, PROVIDER+CLUSTER (repeatable)")
	cmd.Flags().StringArrayVar(&f.resources, "resource", nil, "only this resource, NAME or KIND/NAME (repeatable)")
}

func (f filters) query() url.Values {
	q := url.Values{}
	for k, v := range map[string][]string{"app": f.apps, "cluster": f.clusters, "resource": f.resources} {
		if len(v) > 0 {
			q[k] = v
		}
	}
	return q
}

// completeRef offers the deployment intent groups the server lists.
func (a *app) completeRef(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := a.client(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	o, _, err := c.Overview(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var out []string
	for _, d := range o.DeploymentIntentGroups {
		out = append(out, d.Project+"/"+d.CompositeApp+"/"+d.Version+"/"+d.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
