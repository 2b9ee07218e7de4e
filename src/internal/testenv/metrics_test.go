package testenv

import "testing"

func TestMetric(t *testing.T) {
	const text = `# HELP a_gauge A gauge.
# TYPE a_gauge gauge
a_gauge 3
# TYPE a_total counter
a_total 7.5
# TYPE by_label gauge
by_label{reason="x"} 2
a_gauge_suffix 9
# TYPE took_seconds histogram
took_seconds_bucket{le="1"} 2
took_seconds_bucket{le="+Inf"} 4
took_seconds_sum 6.5
took_seconds_count 4
`
	for name, want := range map[string]float64{"a_gauge": 3, "a_total": 7.5, "a_gauge_suffix": 9, "took_seconds_count": 4, "took_seconds_sum": 6.5} {
		if got, ok := Metric(text, name); !ok || got != want {
			t.Errorf("Metric(%s) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"by_label", "absent", "a_gauge_", "took_seconds", "a_gauge_count"} {
		if got, ok := Metric(text, name); ok {
			t.Errorf("Metric(%s) = %v, want none", name, got)
		}
	}
	if _, ok := Metric("not {{ an exposition", "a_gauge"); ok {
		t.Error("a text that does not parse gave a value")
	}
}
