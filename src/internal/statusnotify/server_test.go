package statusnotify

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNotification(t *testing.T) {
	res := func(name, deployed, ready string) status.Resource {
		return status.Resource{Name: name, GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}, DeployedStatus: deployed, ReadyStatusEMCO: ready}
	}
	r := status.Response{DeployedStatus: "Instantiated", ReadyStatusEMCO: "NotReady", Apps: []status.App{
		{Name: "fw", Clusters: []status.Cluster{
			{ClusterProvider: "cp", Cluster: "e1", Resources: []status.Resource{res("fw", "Applied", "Ready")}},
			{ClusterProvider: "cp", Cluster: "e2", Resources: []status.Resource{res("fw", "Applied", "NotReady")}},
		}},
	}}
	dig, cluster := subject{}, subject{clusters: true}
	if n := notification(r, true, false, dig); n.GetStatusValue() != pb.StatusValue_NOT_READY || len(n.GetDetails()) != 0 {
		t.Errorf("ready summary: %v", n)
	}
	if n := notification(r, false, false, dig); n.GetStatusValue() != pb.StatusValue_DEPLOYED {
		t.Errorf("deployed summary: %v", n)
	}
	n := notification(r, true, true, dig)
	app := n.GetDetails()[0].GetApp()
	if app.GetApp() != "fw" || app.GetStatusValue() != pb.StatusValue_NOT_READY || len(app.GetClusters()) != 2 ||
		app.GetClusters()[0].GetStatusValue() != pb.StatusValue_READY || app.GetClusters()[1].GetResources()[0].GetStatusValue() != pb.StatusValue_NOT_READY ||
		app.GetClusters()[0].GetResources()[0].GetGvk().GetKind() != "Deployment" {
		t.Errorf("ready, all, by app: %v", n)
	}
	n = notification(r, false, true, cluster)
	if len(n.GetDetails()) != 2 || n.GetDetails()[1].GetCluster().GetCluster() != "e2" || n.GetDetails()[1].GetCluster().GetStatusValue() != pb.StatusValue_DEPLOYED {
		t.Errorf("deployed, all, by cluster: %v", n)
	}
	r.DeployedStatus = "Updating"
	if n := notification(r, false, false, dig); n.GetStatusValue() != pb.StatusValue_NOT_DEPLOYED {
		t.Errorf("updating: %v", n)
	}
	r.DeployedStatus, r.ReadyStatusEMCO = "Instantiated", ""
	if n := notification(r, true, false, subject{clusters: true, readyWhenDeployed: true}); n.GetStatusValue() != pb.StatusValue_READY {
		t.Errorf("a deployed logical cloud: %v", n)
	}
}

// fakeStatus answers a DIG's status from a value the test changes; a
// missing DIG is NotFound.
type fakeStatus struct {
	mu      sync.Mutex
	current status.Response
	queries []url.Values
}

func (f *fakeStatus) DIG(_ context.Context, dig catalog.Key, v url.Values) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if dig[3] != "dig" {
		return nil, errdefs.NotFound("deployment intent group %q not found", dig[3])
	}
	f.queries = append(f.queries, v)
	return f.current, nil
}
func (f *fakeStatus) Cluster(context.Context, string, string, url.Values) (any, error) {
	return nil, errdefs.NotFound("no")
}
func (f *fakeStatus) LogicalCloud(_ context.Context, lc catalog.Key, _ url.Values) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if lc[1] != "lc" {
		return nil, errdefs.NotFound("no")
	}
	// A logical cloud answers its own shape, the clusters at the top.
	r := f.current
	clusters := []status.Cluster{{ClusterProvider: "cp", Cluster: "e1", Resources: []status.Resource{{Name: "ns", DeployedStatus: "Applied"}}}}
	return status.CloudResponse{Response: r, Clusters: clusters}, nil
}

func (f *fakeStatus) set(deployed string) {
	f.mu.Lock()
	f.current.DeployedStatus = deployed
	f.mu.Unlock()
}

// fakeChanges lets the test announce changes of a group.
type fakeChanges struct {
	mu        sync.Mutex
	listeners map[string][]func()
}

func (f *fakeChanges) Listen(group string, fn func()) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners[group] = append(f.listeners[group], fn)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.listeners, group)
	}
}

func (f *fakeChanges) changed(group string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fn := range f.listeners[group] {
		fn()
	}
}

func (f *fakeChanges) listening(group string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.listeners[group]) > 0
}

type tokens map[string]bool

func (t tokens) Valid(tok string) bool { return t[tok] }

// serve runs the service on an in-memory listener and returns a client.
func serve(t *testing.T, opts Options) pb.StatusNotifyClient {
	t.Helper()
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	serveOn(t, svc, ln)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewStatusNotifyClient(conn)
}

// serveOn serves svc on ln until the test ends.
func serveOn(t *testing.T, svc *Server, ln net.Listener) {
	t.Helper()
	srv := grpc.NewServer(svc.ServerOptions()...)
	svc.Register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

func digReg(client, dig string) *pb.StatusRegistration {
	return &pb.StatusRegistration{ClientId: client, StatusType: pb.StatusValue_DEPLOYED,
		Key:  &pb.StatusRegistration_DigKey{DigKey: &pb.DigKey{Project: "p", CompositeApp: "ca", CompositeAppVersion: "v1", DeploymentIntentGroup: dig}},
		Apps: []string{"fw"}, Clusters: []string{"cp+e1"}}
}

// A registration gets the current status, then one notification per
// change that alters it (an unchanged status is not sent again), and ends
// when the client deregisters.
func TestRegisterFollowsChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiated"}}
	ch := &fakeChanges{listeners: map[string][]func(){}}
	client := serve(t, Options{Status: st, Changes: ch})
	stream, err := client.StatusRegister(ctx, digReg("c1", "dig"))
	if err != nil {
		t.Fatal(err)
	}
	recv := func(want pb.StatusValue) {
		t.Helper()
		n, err := stream.Recv()
		if err != nil || n.GetStatusValue() != want {
			t.Fatalf("notification %v %v, want %s", n, err, want)
		}
	}
	recv(pb.StatusValue_DEPLOYED)
	group := catalog.DIGGroup(catalog.Key{"p", "ca", "v1", "dig"})
	if !ch.listening(group) {
		t.Fatal("the registration does not follow the DIG's group")
	}
	ch.changed(group) // nothing visible changed: no notification
	st.set("Updating")
	ch.changed(group)
	recv(pb.StatusValue_NOT_DEPLOYED)
	st.set("Updated")
	ch.changed(group)
	recv(pb.StatusValue_DEPLOYED)

	st.mu.Lock()
	q := st.queries[0]
	st.mu.Unlock()
	if q.Get("type") != "rsync" || q.Get("output") != "summary" || q.Get("app") != "fw" || q.Get("cluster") != "cp+e1" {
		t.Errorf("status query %v", q)
	}
	if _, err := client.StatusRegister(ctx, digReg("c1", "dig")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StatusDeregister(ctx, &pb.StatusDeregistration{ClientId: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the stream goes on after the client deregistered")
	}
	if _, err := client.StatusDeregister(ctx, &pb.StatusDeregistration{ClientId: "unknown"}); err != nil {
		t.Fatalf("deregistering an unknown client: %v", err)
	}
}

// A logical cloud's registration gets its current status at once, its
// clusters as details, and a notification when it changes state.
func TestRegisterLogicalCloud(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiating"}}
	ch := &fakeChanges{listeners: map[string][]func(){}}
	client := serve(t, Options{Status: st, Changes: ch})
	stream, err := client.StatusRegister(ctx, &pb.StatusRegistration{ClientId: "c", StatusType: pb.StatusValue_READY, Output: pb.OutputType_ALL,
		Key: &pb.StatusRegistration_LcKey{LcKey: &pb.LcKey{Project: "p", LogicalCloud: "lc"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := stream.Recv()
	if err != nil || n.GetStatusValue() != pb.StatusValue_NOT_READY || n.GetDetails()[0].GetCluster().GetCluster() != "e1" {
		t.Fatalf("first notification %v %v", n, err)
	}
	st.set("Instantiated")
	ch.changed(catalog.LogicalCloudGroup("p", "lc"))
	if n, err := stream.Recv(); err != nil || n.GetStatusValue() != pb.StatusValue_READY {
		t.Fatalf("after the change %v %v", n, err)
	}
}

func TestRegisterRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiated"}}
	client := serve(t, Options{Status: st, Changes: &fakeChanges{listeners: map[string][]func(){}}, MaxStreams: 1})
	code := func(reg *pb.StatusRegistration) codes.Code {
		t.Helper()
		s, err := client.StatusRegister(ctx, reg)
		if err == nil {
			_, err = s.Recv()
		}
		return grpcstatus.Code(err)
	}
	if c := code(digReg("", "dig")); c != codes.InvalidArgument {
		t.Errorf("no client id: %s", c)
	}
	if c := code(&pb.StatusRegistration{ClientId: "x"}); c != codes.InvalidArgument {
		t.Errorf("no key: %s", c)
	}
	if c := code(digReg("x", "other")); c != codes.NotFound {
		t.Errorf("unknown DIG: %s", c)
	}
	if c := code(digReg("x", "bad/name")); c != codes.InvalidArgument {
		t.Errorf("a name with a slash: %s", c)
	}
	first, err := client.StatusRegister(ctx, digReg("held", "dig"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	if c := code(digReg("held", "dig")); c != codes.AlreadyExists {
		t.Errorf("a client id in use: %s", c)
	}
	if c := code(digReg("another", "dig")); c != codes.ResourceExhausted {
		t.Errorf("beyond MaxStreams: %s", c)
	}
}

// With tokens configured, a call without a valid bearer token in its
// metadata is refused.
func TestTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiated"}}
	client := serve(t, Options{Status: st, Changes: &fakeChanges{listeners: map[string][]func(){}}, Tokens: tokens{"s3cret": true}})
	for name, md := range map[string]metadata.MD{
		"none":  nil,
		"wrong": metadata.Pairs("authorization", "Bearer nope"),
		"basic": metadata.Pairs("authorization", "Basic s3cret"),
	} {
		s, err := client.StatusRegister(metadata.NewOutgoingContext(ctx, md), digReg("c-"+name, "dig"))
		if err == nil {
			_, err = s.Recv()
		}
		if grpcstatus.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if _, err := client.StatusDeregister(ctx, &pb.StatusDeregistration{ClientId: "x"}); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("deregister without a token: %v", err)
	}
	s, err := client.StatusRegister(metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "bearer s3cret")), digReg("ok", "dig"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Recv(); err != nil || n.GetStatusValue() != pb.StatusValue_DEPLOYED {
		t.Fatalf("with the token: %v %v", n, err)
	}
}

// A client id belongs to the token that registered it: another token (a
// read-only one, say) can neither end that stream with StatusDeregister
// nor hold the id against it.
func TestClientIDsBelongToTheirToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := &fakeStatus{current: status.Response{DeployedStatus: "Instantiated"}}
	ch := &fakeChanges{listeners: map[string][]func(){}}
	client := serve(t, Options{Status: st, Changes: ch, Tokens: tokens{"owner": true, "other": true}})
	as := func(token string) context.Context {
		return metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	}
	stream, err := client.StatusRegister(as("owner"), digReg("dtc", "dig"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := stream.Recv(); err != nil || n.GetStatusValue() != pb.StatusValue_DEPLOYED {
		t.Fatalf("first notification %v %v", n, err)
	}
	if _, err := client.StatusDeregister(as("other"), &pb.StatusDeregistration{ClientId: "dtc"}); err != nil {
		t.Fatal(err)
	}
	theirs, err := client.StatusRegister(as("other"), digReg("dtc", "dig"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Recv(); err != nil {
		t.Fatalf("the same id under another token: %v", err)
	}
	st.set("Updating")
	ch.changed(catalog.DIGGroup(catalog.Key{"p", "ca", "v1", "dig"}))
	if n, err := stream.Recv(); err != nil || n.GetStatusValue() != pb.StatusValue_NOT_DEPLOYED {
		t.Fatalf("the owner's stream after another token deregistered its id: %v %v", n, err)
	}
}
