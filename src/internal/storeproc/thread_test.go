package storeproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// With this variable set the test binary is a stand-in stores program: it
// says it is ready and waits for SIGTERM.
const standInEnv = "ARGUS_STOREPROC_STAND_IN"

func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) != "" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Printf("%s{\"etcd\":[\"http://127.0.0.1:1\"]}\n", readyPrefix)
		<-sig
		os.Exit(0)
	}
	// The main thread never ends (the runtime wedges it instead), so no
	// test goroutine may run on it for the thread test to mean anything.
	runtime.LockOSThread()
	os.Exit(m.Run())
}

// The thread that started the stores process outlives it: another child
// that thread started, with its own parent-death signal, is not killed
// when the stores process ends (a CI run lost simulated clusters' control
// planes this way).
func TestTheStartingThreadOutlivesTheChild(t *testing.T) {
	t.Setenv(standInEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var sibling *exec.Cmd
	p, err := Start(context.Background(), Options{
		Binary: self, Dir: t.TempDir(),
		onThread: func() {
			sibling = exec.Command("sleep", "300")
			sibling.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := sibling.Start(); err != nil {
				t.Errorf("start sleep: %v", err)
				sibling = nil
				return
			}
			t.Cleanup(func() { _ = sibling.Process.Kill() })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sibling == nil {
		_ = p.Stop()
		t.FailNow()
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sibling.Wait() }()
	// The thread would end just after the goroutine that waited for the
	// stores process; three seconds is an observation window.
	select {
	case err := <-waited:
		t.Fatalf("the sibling died with the stores process: %v", err)
	case <-time.After(3 * time.Second):
	}
}
