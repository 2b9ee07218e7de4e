package client

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadEvents(t *testing.T) {
	in := ": heartbeat\n\nid: 3\nevent: snapshot\ndata: {\"a\":1}\n\nevent: history\ndata: {\"b\":\ndata: 2}\n\nretry: 10\n\n"
	var got []Event
	err := readEvents(strings.NewReader(in), func(e Event) error {
		got = append(got, e)
		return nil
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("end of stream: %v", err)
	}
	if len(got) != 2 || got[0].ID != 3 || got[0].Name != "snapshot" || string(got[0].Data) != `{"a":1}` ||
		got[1].ID != 0 || got[1].Name != "history" || string(got[1].Data) != "{\"b\":\n2}" {
		t.Fatalf("events %+v", got)
	}
	// A line longer than an event may be is refused, not buffered.
	huge := "data: " + strings.Repeat("x", MaxEvent+1) + "\n\n"
	if err := readEvents(strings.NewReader(huge), func(Event) error { return nil }); err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("an oversized event: %v", err)
	}
}

func TestParseRef(t *testing.T) {
	r, err := ParseRef("demo/shop/v1/shop")
	if err != nil || r.Path() != "/v2/projects/demo/composite-apps/shop/v1/deployment-intent-groups/shop" || r.String() != "demo/shop/v1/shop" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"", "a/b/c", "a/b/c/d/e", "a//c/d", "/b/c/d"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	r, _ = ParseRef("p q/ca/v1/d%x")
	if r.Path() != "/v2/projects/p%20q/composite-apps/ca/v1/deployment-intent-groups/d%25x" {
		t.Fatalf("escaped path %s", r.Path())
	}
	if i, err := InstanceRef("123"); err != nil || i.Path() != "/v1/instance/123" {
		t.Fatalf("%+v %v", i, err)
	}
}

// FuzzReadEvents: whatever a server streams, the reader neither panics
// nor hands over an event larger than MaxEvent.
func FuzzReadEvents(f *testing.F) {
	f.Add("id: 1\nevent: change\ndata: {}\n\n")
	f.Add(": hb\n\ndata: a\ndata: b\n\n\n")
	f.Add("event\nid: x\ndata\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		_ = readEvents(strings.NewReader(in), func(e Event) error {
			if len(e.Data) > MaxEvent {
				t.Fatalf("event of %d bytes", len(e.Data))
			}
			return nil
		})
	})
}
