package jsonlimit

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDepth(t *testing.T) {
	for in, want := range map[string]int{
		``: 0, `1`: 0, `{}`: 1, `[[],[[]]]`: 3, `{"a":"[[["}`: 1, `"\\"`: 0, `["\"[",[1]]`: 2, `]]]][`: 1, `{"a":{"b":[{"c":1}]}}`: 4,
	} {
		if got := Depth([]byte(in), 100); got != want {
			t.Errorf("Depth(%s) = %d, want %d", in, got, want)
		}
	}
	if got := Depth([]byte(strings.Repeat("[", 1000)), 10); got != 11 {
		t.Errorf("past the limit: %d", got)
	}
}

// FuzzDepth: on valid JSON, Depth agrees with what decoding finds.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"]"}]}`, `"\\\""`, `[[[]]]`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			Depth(data, 64) // must not panic either way
			return
		}
		if got, want := Depth(data, 1<<20), depthOf(v); got != want {
			t.Fatalf("Depth(%q) = %d, decoded depth %d", data, got, want)
		}
	})
}

func depthOf(v any) int {
	d := 0
	switch t := v.(type) {
	case map[string]any:
		for _, e := range t {
			d = max(d, depthOf(e))
		}
		return d + 1
	case []any:
		for _, e := range t {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}
