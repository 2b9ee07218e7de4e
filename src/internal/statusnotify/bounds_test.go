package statusnotify

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// serveTCP runs the service on a loopback listener.
func serveTCP(t *testing.T, svc *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, svc, ln)
	return ln.Addr().String()
}

// dialWatched opens one client connection whose closing by the server the
// test can see.
func dialWatched(t *testing.T, addr string) (*grpc.ClientConn, *testenv.CloseWatch) {
	t.Helper()
	conns := make(chan *testenv.CloseWatch, 1)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(testenv.WatchingDialer(conns)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	cc.Connect()
	select {
	case w := <-conns:
		return cc, w
	case <-time.After(10 * time.Second):
		t.Fatal("no connection")
	}
	return nil, nil
}

// A call that opens a stream and never sends its request is ended after
// RequestTimeout, with a token or without; one without the token the
// service requires is refused on its headers, and in both cases the
// connection, left with no call, is closed after IdleTimeout.
func TestSilentCallsAndTheirConnectionsAreClosed(t *testing.T) {
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiated"}}
	for name, c := range map[string]struct {
		tokens TokenChecker
		md     metadata.MD
		want   codes.Code
	}{
		"open service, no message":       {nil, nil, codes.Canceled},
		"with the token, no message":     {tokens{"s3cret": true}, metadata.Pairs("authorization", "Bearer s3cret"), codes.Canceled},
		"without the token, no message":  {tokens{"s3cret": true}, nil, codes.Unauthenticated},
		"with a wrong token, no message": {tokens{"s3cret": true}, metadata.Pairs("authorization", "Bearer x"), codes.Unauthenticated},
	} {
		t.Run(name, func(t *testing.T) {
			svc, err := New(Options{Status: st, Changes: &fakeChanges{listeners: map[string][]func(){}}, Tokens: c.tokens,
				RequestTimeout: 300 * time.Millisecond, IdleTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			cc, conn := dialWatched(t, serveTCP(t, svc))
			ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), c.md), 30*time.Second)
			defer cancel()
			start := time.Now()
			stream, err := cc.NewStream(ctx, &pb.StatusNotify_ServiceDesc.Streams[0], pb.StatusNotify_StatusRegister_FullMethodName)
			if err != nil {
				t.Fatal(err)
			}
			// Headers only: the request message is never sent.
			var n pb.StatusNotification
			if err := stream.RecvMsg(&n); grpcstatus.Code(err) != c.want {
				t.Fatalf("the silent call ended with %v, want %s", err, c.want)
			}
			t.Logf("call ended after %s", time.Since(start).Round(time.Millisecond))
			select {
			case <-conn.Closed():
				t.Logf("connection closed after %s", time.Since(start).Round(time.Millisecond))
			case <-time.After(30 * time.Second):
				t.Fatal("the connection is still open 30s later")
			}
		})
	}
}

// A unary call (StatusDeregister) whose request message never comes is
// ended after RequestTimeout too: grpc reads a unary call's message
// before its handler runs, so no handler could bound it.
func TestSilentUnaryCallIsEnded(t *testing.T) {
	svc, err := New(Options{Status: &fakeStatus{}, Changes: &fakeChanges{listeners: map[string][]func(){}}, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := dialWatched(t, serveTCP(t, svc))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, pb.StatusNotify_StatusDeregister_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	var resp pb.StatusDeregistrationResponse
	if err := stream.RecvMsg(&resp); grpcstatus.Code(err) != codes.Canceled {
		t.Fatalf("a unary call without its message ended with %v, want Canceled", err)
	}
}

// A registered client that stops reading loses its registration once a
// notification cannot be sent within SendTimeout.
func TestAClientThatStopsReadingLosesItsStream(t *testing.T) {
	big := status.Response{DeployedStatus: "Instantiated", Apps: []status.App{{Name: "fw", Clusters: []status.Cluster{{ClusterProvider: "cp", Cluster: "e1"}}}}}
	for i := range 2000 {
		big.Apps[0].Clusters[0].Resources = append(big.Apps[0].Clusters[0].Resources, status.Resource{
			Name: fmt.Sprintf("%s-%d", strings.Repeat("r", 200), i), GVK: status.GVK{Kind: "ConfigMap", Version: "v1"}, DeployedStatus: "Applied"})
	}
	st := &fakeStatus{current: big}
	ch := &fakeChanges{listeners: map[string][]func(){}}
	svc, err := New(Options{Status: st, Changes: ch, SendTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := dialWatched(t, serveTCP(t, svc))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := digReg("slow", "dig")
	reg.Output = pb.OutputType_ALL
	reg.Apps, reg.Clusters = nil, nil
	if _, err := pb.NewStatusNotifyClient(cc).StatusRegister(ctx, reg); err != nil {
		t.Fatal(err)
	}
	for !svc.registered("slow") {
		if ctx.Err() != nil {
			t.Fatal("never registered")
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // polling with a deadline
	}
	// Never read: each change makes a new notification of ~0.5 MB.
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; svc.registered("slow"); i++ {
		if time.Now().After(deadline) {
			t.Fatal("the registration of a client that reads nothing is still open after 15s")
		}
		st.set(fmt.Sprintf("Instantiated-%d", i))
		ch.changed("dig:p/ca/v1/dig")
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // pacing the changes, not synchronising
	}
}

func (s *Server) registered(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients[clientKey(context.Background(), id)] != nil // no tokens: no caller
}
