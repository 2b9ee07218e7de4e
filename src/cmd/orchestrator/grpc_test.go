package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/testcert"
)

// Issue 23: with --max-connections 64 the gRPC port takes 16 connections.
// 16 that open a StatusRegister stream without a token and send nothing
// more are all closed within 60 s (the token is checked on the stream's
// headers, and a connection with no call left is closed), after which the
// port serves a new connection at once.
func TestSilentGRPCConnectionsAreClosed(t *testing.T) {
	const token = "grpc-token"
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	testcert.WriteFile(t, tokenFile, []byte(token+"\n"))
	p := startProc(t, nil, nil, "--data-dir", t.TempDir(), "--max-connections", "64", "--grpc-listen", "127.0.0.1:0", "--auth-token-file", tokenFile)
	if p.grpcAddr == "" {
		t.Fatal("the gRPC port was not logged")
	}
	start := time.Now()
	var watches []*testenv.CloseWatch
	for i := range 16 {
		w := make(chan *testenv.CloseWatch, 1)
		cc, err := grpc.NewClient("passthrough:///"+p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(testenv.WatchingDialer(w)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The stream's headers, and nothing more.
		if _, err := cc.NewStream(ctx, &pb.StatusNotify_ServiceDesc.Streams[0], pb.StatusNotify_StatusRegister_FullMethodName); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		watches = append(watches, <-w)
	}
	var last time.Duration
	for i, w := range watches {
		select {
		case <-w.Closed():
			last = time.Since(start)
		case <-time.After(90*time.Second - time.Since(start)):
			t.Fatalf("connection %d still open %s after they were opened", i, time.Since(start).Round(time.Second))
		}
	}
	t.Logf("16 silent connections without a token all closed %s after the first was opened", last.Round(100*time.Millisecond))
	if last > 60*time.Second {
		t.Errorf("the last silent connection was closed after %s, want within 60s", last)
	}

	// A new client with the token is served at once: the registration of a
	// DIG that does not exist is answered NotFound.
	begin := time.Now()
	cc, err := grpc.NewClient("passthrough:///"+p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 30*time.Second)
	defer cancel()
	stream, err := pb.NewStatusNotifyClient(cc).StatusRegister(ctx, &pb.StatusRegistration{ClientId: "after",
		Key: &pb.StatusRegistration_DigKey{DigKey: &pb.DigKey{Project: "p", CompositeApp: "ca", CompositeAppVersion: "v1", DeploymentIntentGroup: "d"}}})
	if err == nil {
		_, err = stream.Recv()
	}
	if grpcstatus.Code(err) != codes.NotFound {
		t.Fatalf("a registration after the silent ones: %v, want NotFound", err)
	}
	took := time.Since(begin)
	t.Logf("a new connection was served %s after the silent ones were closed", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("a new connection took %s to be served", took)
	}
	p.terminate(t)
}
