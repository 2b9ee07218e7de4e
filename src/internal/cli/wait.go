package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/argus-mc/argus/src/internal/client"
)

func (a *app) waitCmd() *cobra.Command {
	var subj subject
	var f filters
	var cond string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait REF --for ready|synced --timeout D",
		Short: "Wait until a deployment is ready (or synced); exit 0 when it is, 1 naming why when the timeout passes",
		Long: `wait follows a DIG's (or --instance's) status stream until the condition holds,
then exits 0; when --timeout passes first it exits 1, naming what is not
ready or not synced (worst first). It checks when it starts and after every
change, so it answers as soon as the orchestrator knows. --app, --cluster and
--resource narrow what must hold. Any other failure (an unknown DIG, a
refused token, a server never reached) exits 2.

  ready   every resource is Ready (the status answer's "ready" is true)
  synced  every applied resource is Synced (no OutOfSync, Missing or Unknown)`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeRef,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cond != "ready" && cond != "synced" {
				return fmt.Errorf("--for %q: want ready or synced", cond)
			}
			if timeout <= 0 {
				return errors.New("--timeout must be positive")
			}
			ref, c, err := a.open(cmd, &subj, args)
			if err != nil {
				return err
			}
			return a.wait(cmd, c, ref, f, cond, timeout)
		},
	}
	subj.flags(cmd)
	f.flags(cmd)
	cmd.Flags().StringVar(&cond, "for", "ready", "ready or synced")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait")
	return cmd
}

// errReached ends the stream when the condition holds.
var errReached = errors.New("reached")

func (a *app) wait(cmd *cobra.Command, c *client.Client, ref client.Ref, f filters, cond string, timeout time.Duration) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	q, err := streamQuery(ref, f)
	if err != nil {
		return err
	}
	connected := false
	var lastErr error
	err = c.Watch(ctx, ref, q, func(e client.Event) error {
		switch e.Name {
		case "snapshot", "change":
			connected = true
			v, _, err := a.view(ctx, c, ref, f)
			if err != nil {
				lastErr = err // the next event tries again
				return nil
			}
			if holds(v, cond) {
				return errReached
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errReached):
		fmt.Fprintf(cmd.OutOrStdout(), "%s is %s (%s)\n", ref, cond, time.Since(start).Round(100*time.Millisecond))
		return nil
	case err != nil:
		return err
	case cmd.Context().Err() != nil:
		return cmd.Context().Err()
	case !connected:
		if lastErr == nil {
			lastErr = errors.New("no answer")
		}
		return fmt.Errorf("timed out after %s without reaching the server: %w", timeout, lastErr)
	}
	return notReached{why: fmt.Sprintf("timed out after %s: %s", timeout, a.whyNot(cmd, c, ref, f, cond))}
}

// holds reports the condition on a status.
func holds(v statusView, cond string) bool {
	if cond == "ready" {
		return v.ready
	}
	n := 0
	for state, count := range v.syncCounts {
		if state != "Synced" && count > 0 {
			return false
		}
		n += count
	}
	return n > 0
}

// whyNot says what keeps the condition from holding, from a fresh status.
func (a *app) whyNot(cmd *cobra.Command, c *client.Client, ref client.Ref, f filters, cond string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 10*time.Second)
	defer cancel()
	v, _, err := a.view(ctx, c, ref, f)
	if err != nil {
		return fmt.Sprintf("%s is not %s (and its status cannot be read now: %v)", ref, cond, err)
	}
	var parts []string
	for i, b := range wrongOf(v) {
		if cond == "synced" && b.n.sync == "" {
			continue
		}
		if len(parts) == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(wrongOf(v))-i))
			break
		}
		state := b.n.ready
		if cond == "synced" {
			state = b.n.sync
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s (%s on %s): %s", state, b.n.kind, b.n.name, b.app, b.cluster,
			localTimes(or(b.n.reason, or(b.why, "no reason given")), a.opts.Location)))
	}
	what := "not ready"
	if cond == "synced" {
		what = "not synced"
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%s is %s (%s)", ref, what, strings.TrimPrefix(countsText(v.readyCounts, ""), " "))
	}
	return fmt.Sprintf("%s is %s: %s", ref, what, strings.Join(parts, "; "))
}
