package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
)

// SimulateOptions is a whole run as `simcluster fleet` makes it.
type SimulateOptions struct {
	// API are the orchestrators' URLs; the first registers the clusters.
	API []string
	// Provider and Label as in RegisterOptions; Prefix starts the
	// clusters' names ("sim" when empty: sim00000, sim00001, …).
	Provider, Label, Prefix string
	Clusters                int
	// Churn, FlapEvery, FlapFraction and Seed as in Options.
	Churn        float64
	FlapEvery    time.Duration
	FlapFraction float64
	Seed         uint64
	Logger       *logrus.Entry
}

// Summary is what a run did.
type Summary struct {
	Clusters, Changes, Flaps int
	Errors                   []error
}

// Simulate registers the clusters, runs the fleet until ctx ends and
// returns what it did. Progress (registered, every agent connected) is
// logged.
func Simulate(ctx context.Context, o SimulateOptions) (Summary, error) {
	if len(o.API) == 0 || o.Clusters <= 0 {
		return Summary{}, errors.New("fleetsim: API and Clusters are required")
	}
	if o.Prefix == "" {
		o.Prefix = "sim"
	}
	if o.Logger == nil {
		o.Logger = logrus.NewEntry(logging.Discard())
	}
	names := make([]string, o.Clusters)
	for i := range names {
		names[i] = fmt.Sprintf("%s%05d", o.Prefix, i)
	}
	tokens, err := Register(ctx, RegisterOptions{API: o.API[0], Provider: o.Provider, Clusters: names, Label: o.Label})
	if err != nil {
		return Summary{}, fmt.Errorf("register the clusters: %w", err)
	}
	o.Logger.WithField("clusters", len(tokens)).Info("clusters registered; agents joining")
	f, err := New(Options{Orchestrators: o.API, Tokens: tokens, Churn: o.Churn, Seed: o.Seed,
		FlapEvery: o.FlapEvery, FlapFraction: o.FlapFraction, Logger: o.Logger})
	if err != nil {
		return Summary{}, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	reportConnected(ctx, f, o.Logger)
	<-done
	return Summary{Clusters: len(tokens), Changes: len(f.Changes()), Flaps: f.Flaps(), Errors: f.Errors()}, nil
}

// reportConnected logs once every agent is connected (or ctx ends).
func reportConnected(ctx context.Context, f *Fleet, log *logrus.Entry) {
	start := time.Now()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f.Connected() == len(f.clusters) {
				log.WithField("took", time.Since(start).Round(time.Millisecond).String()).Info("every agent connected")
				return
			}
		}
	}
}
