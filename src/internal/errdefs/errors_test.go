package errdefs

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestKindsSurviveWrapping(t *testing.T) {
	err := fmt.Errorf("delete project: %w", Conflict("project %q has composite apps", "p1"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("errors.Is(ErrConflict) = false for %v", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Fatalf("conflict must not match ErrNotFound")
	}
	if got, want := err.Error(), `delete project: project "p1" has composite apps`; got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}

func TestCauseIsKept(t *testing.T) {
	err := Unprocessable(io.ErrUnexpectedEOF, "decode body")
	if !errors.Is(err, ErrUnprocessable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("kind and cause must both match: %v", err)
	}
	if got, want := err.Error(), "decode body: unexpected EOF"; got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}
