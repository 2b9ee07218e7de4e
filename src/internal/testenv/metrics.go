package testenv

import (
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric is the value of the unlabelled series name (a gauge, counter or
// untyped, or a histogram's or summary's _count or _sum) in a Prometheus
// text exposition, as /metrics serves it; false when it has none, or the
// text does not parse.
func Metric(exposition, name string) (float64, bool) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		return 0, false
	}
	family, part := name, ""
	if families[name] == nil {
		for _, suffix := range []string{"_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				family, part = base, suffix
			}
		}
	}
	for _, m := range families[family].GetMetric() {
		if len(m.GetLabel()) > 0 {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), part == ""
		case m.Counter != nil:
			return m.GetCounter().GetValue(), part == ""
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), part == ""
		case m.Histogram != nil && part == "_count":
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Histogram != nil && part == "_sum":
			return m.GetHistogram().GetSampleSum(), true
		case m.Summary != nil && part == "_count":
			return float64(m.GetSummary().GetSampleCount()), true
		case m.Summary != nil && part == "_sum":
			return m.GetSummary().GetSampleSum(), true
		}
	}
	return 0, false
}
