package storeproc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/storeproc"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// The stores come up in their own process, answer, and are gone after Stop.
func TestStartServeStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := testenv.StoresBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := storeproc.Start(ctx, storeproc.Options{Binary: bin, Dir: dir, Mongo: true})
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info()
	if len(info.Etcd) == 0 || !strings.HasPrefix(info.Mongo, "mongodb://127.0.0.1:") {
		t.Fatalf("info = %+v", info)
	}
	pid := p.PID()
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if alive := testenv.Alive([]int{pid}); len(alive) > 0 {
		t.Fatalf("the stores process %d is still running", pid)
	}
}

// A program that exits instead of serving fails Start, with its output.
func TestStartFailsWhenTheProgramExits(t *testing.T) {
	_, err := storeproc.Start(context.Background(), storeproc.Options{Binary: "false", Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("err = %v", err)
	}
}
