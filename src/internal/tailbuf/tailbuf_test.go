package tailbuf

import (
	"fmt"
	"strings"
	"testing"
)

func TestStringKeepsBothEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing", nil, ""},
		{"fits the head", []string{"boom\n"}, "boom"},
		{"ends overlap", []string{"0123456789", "abcdef"}, "0123456789abcdef"},
		{"a gap", []string{"0123456789", "-----", "abcdefghij"}, "0123456789\n…\nabcdefghij"},
		{"many small writes", strings.Split("0123456789abcdefghijklmnopqrstuvwxyz", ""), "0123456789\n…\nqrstuvwxyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(10)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLineFindsWhy(t *testing.T) {
	b := New(64)
	fmt.Fprint(b, "starting\nfatal error: out of memory\n")
	for range 100 {
		fmt.Fprint(b, "goroutine 1 [running]:\n\tmain.main()\n")
	}
	if got := b.Line("panic:", "fatal error:"); got != "fatal error: out of memory" {
		t.Errorf("Line = %q", got)
	}
	if got := b.Line("nothing like it"); got != "main.main()" {
		t.Errorf("Line without a match = %q, want the last line", got)
	}
	if got := New(8).Line("x"); got != "" {
		t.Errorf("Line of nothing = %q", got)
	}
}
