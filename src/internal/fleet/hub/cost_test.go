package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/agent"
)

// TestIdleTransportCost measures what an idle TLS agent costs on each
// transport: ARGUS_TRANSPORT_COST=N agents (the real agent code, in this
// process) connect and idle; the heap in use, stacks and goroutines per
// agent are logged, and with ARGUS_TRANSPORT_PROFILE_DIR a heap profile
// per variant is written there. The agents' own share is the same in every
// variant (the same client), so the differences are the server's. It is a
// measurement, skipped unless asked for (docs/benchmarks.md):
//
//	ARGUS_TRANSPORT_COST=500 go test -run TestIdleTransportCost -v ./src/internal/fleet/hub
func TestIdleTransportCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ARGUS_TRANSPORT_COST"))
	if n <= 0 {
		t.Skip("a measurement: set ARGUS_TRANSPORT_COST=N agents")
	}
	dir := os.Getenv("ARGUS_TRANSPORT_PROFILE_DIR")
	if dir != "" {
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 4096 // small per-connection allocations too
	}
	limits := []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true})}
	variants := []struct {
		name      string
		transport string
		opts      []grpc.ServerOption
	}{
		{"http2", transportHTTP2, nil},
		{"native-grpc-defaults", transportNative, limits},
		{"native-read0", transportNative, append(limits[:len(limits):len(limits)], grpc.ReadBufferSize(0))},
		{"native-read0-shared-write", transportNative, append(limits[:len(limits):len(limits)], grpc.ReadBufferSize(0), grpc.SharedWriteBuffer(true))},
		{"native-chosen", transportNative, nil},
		{"framed", transportFramed, nil},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t, func(o *Options) {
				o.Heartbeat, o.nativeOptions, o.grpcOnly = 10*time.Second, v.opts, v.transport == transportNative
			})
			url, roots := f.serveTLS(t, v.transport != transportHTTP2)
			creds := make([]*memCredentials, n)
			for i := range creds {
				creds[i] = f.joined(t, appcontext.ClusterRef{Provider: "cp", Name: fmt.Sprintf("c%05d", i)})
			}
			before := idleUse()
			agents := make([]*agent.Agent, n)
			for i := range agents {
				agents[i] = tlsAgent(t, url, roots, creds[i])
			}
			waitFor(t, "every agent streaming", func() bool { return f.streams(v.transport) == float64(n) })
			after := idleUse()
			t.Logf("%s: %d agents: per agent heap %.1f KiB, stacks %.1f KiB, goroutines %.2f (agent and server together)",
				v.name, n, float64(after.heap-before.heap)/float64(n)/1024, float64(after.stack-before.stack)/float64(n)/1024,
				float64(after.goroutines-before.goroutines)/float64(n))
			if dir != "" {
				writeProfiles(t, dir, v.name)
			}
		})
	}
}

type use struct {
	heap, stack uint64
	goroutines  int
}

// idleUse is the process's heap in use, stacks and goroutines after the
// agents had time to settle (their first reports and acknowledgements).
func idleUse() use {
	time.Sleep(3 * time.Second) // a measurement, not a synchronisation: let the first reports settle
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return use{heap: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// writeProfiles writes the heap profile and the goroutines (grouped by
// stack) to dir/name.heap.pprof and dir/name.goroutines.txt.
func writeProfiles(t *testing.T, dir, name string) {
	for _, p := range []struct {
		profile, file string
		debug         int
	}{{"heap", ".heap.pprof", 0}, {"goroutine", ".goroutines.txt", 1}} {
		out, err := os.Create(filepath.Join(dir, name+p.file))
		if err != nil {
			t.Fatal(err)
		}
		err = pprof.Lookup(p.profile).WriteTo(out, p.debug)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
