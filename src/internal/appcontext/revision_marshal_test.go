package appcontext

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// A revision encoded a placement at a time is what json.Marshal makes of
// it, with and without placements.
func TestMarshalRevisionAsJSONMarshal(t *testing.T) {
	ref := BlobRef{SHA256: "ab", Size: 3, Chunks: 1}
	for _, rev := range []*Revision{
		{Number: 1, Action: "instantiate", Created: time.Unix(5, 0).UTC()},
		{Number: 3, Action: "instantiate", Created: time.Unix(7, 0).UTC(), Intents: json.RawMessage(`{"spec":"<a&b>"}`),
			Placements: []RevisionPlacement{}},
		{Number: 2, Action: "update", From: 1, Created: time.Unix(6, 0).UTC(), Intents: json.RawMessage(`{"a":1}`),
			Dependencies: map[string][]Dependency{"x": nil},
			Placements: []RevisionPlacement{
				{App: "a", Cluster: ClusterRef{Provider: "p", Name: "c1"}, Resources: []Resource{{Name: "x<y>", ManifestRef: &ref}}},
				{App: "b", Cluster: ClusterRef{Provider: "p", Name: "c2"}},
			}},
	} {
		want, err := json.Marshal(rev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshalRevision(rev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("revision %d:\n got %s\nwant %s", rev.Number, got, want)
		}
	}
}
