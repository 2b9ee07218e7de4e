package render

import (
	"context"

	"github.com/argus-mc/argus/src/internal/archive"
)

// InProcess renders in the calling process, bounded in output size only.
// It is the default of packages whose Options leave the renderer unset
// (unit tests, tools); the orchestrator uses a Pool.
type InProcess struct {
	Limits    archive.Limits
	MaxOutput int64
}

// Render renders opts with the receiver's limits.
func (p InProcess) Render(_ context.Context, opts Options) ([]Resource, error) {
	opts.Limits, opts.MaxOutput = p.Limits, p.MaxOutput
	return Render(opts)
}

// CheckChart loads a chart archive, as LoadChart does, and returns the
// chart's name.
func (p InProcess) CheckChart(_ context.Context, data []byte, chartName string) (string, error) {
	ch, err := LoadChart(data, chartName, p.Limits)
	if err != nil {
		return "", err
	}
	return ch.Name(), nil
}

// CheckProfile reads a profile archive, as ProfileValues does.
func (p InProcess) CheckProfile(_ context.Context, data []byte) error {
	_, err := ProfileValues(data, p.Limits)
	return err
}
