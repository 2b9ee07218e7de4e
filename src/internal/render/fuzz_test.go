package render

import (
	"encoding/json"
	"maps"
	"testing"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// FuzzOverrideValues takes a DIG spec's JSON as a caller sends it: whatever
// decodes survives the store's encoding unchanged, and applying its values
// with Helm's --set semantics never panics and ends the same way however
// the map is ordered.
func FuzzOverrideValues(f *testing.F) {
	f.Add([]byte(`{"compositeProfile":"cp","overrideValues":[{"app":"web","values":{"image.repository":"x","service.port":"8080"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"$x":"1","a\\.b":"2","l[0].n":"v","a":"1,b=2"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"a":"1","a.b":"2"}}]}`))
	f.Add([]byte(`{"overrideValues":[{"app":"a","values":{"x[999999]":"1"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec catalog.DIGSpec
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		b, err := bson.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal %+v: %v", spec, err)
		}
		var back catalog.DIGSpec
		if err := bson.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if len(back.OverrideValues) != len(spec.OverrideValues) {
			t.Fatalf("round trip lost entries: %+v → %+v", spec, back)
		}
		for i, ov := range spec.OverrideValues {
			if !maps.Equal(ov.Values, back.OverrideValues[i].Values) {
				t.Fatalf("round trip changed %v into %v", ov.Values, back.OverrideValues[i].Values)
			}
			v1, err1 := Values(nil, ov.Values)
			v2, err2 := Values(nil, back.OverrideValues[i].Values)
			j1, _ := json.Marshal(v1)
			j2, _ := json.Marshal(v2)
			if (err1 == nil) != (err2 == nil) || string(j1) != string(j2) {
				t.Fatalf("values differ between runs: %s / %s, %v / %v", j1, j2, err1, err2)
			}
		}
	})
}
