package join

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

// clock is a settable clock for expiry tests.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.now.Load()) }
func (c *clock) add(d time.Duration) { c.now.Add(int64(d)) }

func start(t *testing.T, opts Options) (*Service, string) {
	t.Helper()
	prefix := env.EtcdPrefix()
	opts.Client, opts.Prefix = env.Etcd.Client, prefix
	svc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-svc.Ready()
	return svc, prefix
}

// eventually polls cond with a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not true after 30s", what)
}

var edge = appcontext.ClusterRef{Provider: "cp", Name: "edge01"}

func TestTokenIsSingleUseAndCredentialAuthenticates(t *testing.T) {
	t.Parallel()
	svc, prefix := start(t, Options{})
	ctx := t.Context()
	tok, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "registered", func() bool { return svc.Pulls(edge) })
	// Two agents racing with one token: exactly one gets a credential.
	var wg sync.WaitGroup
	var wins atomic.Int32
	var cred Credential
	var mu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := svc.Exchange(ctx, tok.Token, "")
			if err == nil {
				wins.Add(1)
				mu.Lock()
				cred = c
				mu.Unlock()
			} else if !errors.Is(err, errdefs.ErrUnauthorized) {
				t.Errorf("exchange: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d exchanges of one token succeeded, want 1", wins.Load())
	}
	if cred.Cluster != edge {
		t.Fatalf("credential for %v, want %v", cred.Cluster, edge)
	}
	if _, err := svc.Exchange(ctx, tok.Token, ""); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("reused token: %v, want unauthorized", err)
	}
	eventually(t, "credential known", func() bool { ref, _, err := svc.Authenticate(cred.Credential); return err == nil && ref == edge })
	for _, bad := range []string{"", "x", cred.Credential + "x", tok.Token, strings.Repeat("a", 1000)} {
		if _, _, err := svc.Authenticate(bad); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("Authenticate(%.20q): %v, want unauthorized", bad, err)
		}
	}
	// Neither the token nor the credential is stored, only their hashes.
	resp, err := env.Etcd.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := strings.Cut(tok.Token, ".")
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), secret) || strings.Contains(string(kv.Value), cred.Credential) {
			t.Errorf("%s holds a secret in the clear", kv.Key)
		}
	}
}

func TestExpiredTokenIsRefused(t *testing.T) {
	t.Parallel()
	c := &clock{}
	c.now.Store(time.Now().UnixNano())
	svc, _ := start(t, Options{TokenTTL: time.Minute, Now: c.Now})
	tok, err := svc.Register(t.Context(), edge)
	if err != nil {
		t.Fatal(err)
	}
	c.add(61 * time.Second)
	if _, err := svc.Exchange(t.Context(), tok.Token, ""); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("expired token: %v, want unauthorized", err)
	}
}

func TestNewTokenVoidsTheOldAndRejoinReplacesTheCredential(t *testing.T) {
	t.Parallel()
	svc, _ := start(t, Options{})
	ctx := t.Context()
	first, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	cred1, err := svc.Exchange(ctx, first.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	third, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exchange(ctx, second.Token, ""); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("superseded token: %v, want unauthorized", err)
	}
	cred2, err := svc.Exchange(ctx, third.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "old credential replaced", func() bool {
		_, _, err1 := svc.Authenticate(cred1.Credential)
		_, _, err2 := svc.Authenticate(cred2.Credential)
		return err1 != nil && err2 == nil
	})
}

func TestRevokeEndsTheCredentialEverywhere(t *testing.T) {
	t.Parallel()
	svc, prefix := start(t, Options{})
	// A second replica on the same stores.
	other, err := New(Options{Client: env.Etcd.Client, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var events []bool
	var mu sync.Mutex
	other.OnChange(func(ref appcontext.ClusterRef, present bool) {
		mu.Lock()
		defer mu.Unlock()
		if ref == edge {
			events = append(events, present)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	defer func() { cancel(); <-done }()

	tok, err := svc.Register(t.Context(), edge)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := svc.Exchange(t.Context(), tok.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "known on the other replica", func() bool { _, _, err := other.Authenticate(cred.Credential); return err == nil })
	if err := svc.Revoke(t.Context(), edge); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revoked on the other replica", func() bool {
		_, _, err := other.Authenticate(cred.Credential)
		return err != nil && !other.Pulls(edge)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[len(events)-1] {
		t.Fatalf("change events %v; want the last to say deleted", events)
	}
}

// An agent that chose its credential can repeat its exchange (its answer
// was lost) and is answered the same; nobody else can with that token,
// and once the cluster's credential changed or the cluster is gone, not
// it either.
func TestExchangeWithAChosenCredentialCanBeRepeated(t *testing.T) {
	t.Parallel()
	svc, _ := start(t, Options{})
	ctx := t.Context()
	tok, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := NewCredential()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCredential()
	for i := range 2 { // the answer to the first is lost
		c, err := svc.Exchange(ctx, tok.Token, mine)
		if err != nil || c.Credential != mine || c.Cluster != edge {
			t.Fatalf("exchange %d with the chosen credential: %+v %v", i+1, c, err)
		}
	}
	for name, chosen := range map[string]string{"another credential": other, "none": ""} {
		if _, err := svc.Exchange(ctx, tok.Token, chosen); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Fatalf("the spent token with %s: %v, want unauthorized", name, err)
		}
	}
	eventually(t, "the chosen credential authenticates", func() bool { _, _, err := svc.Authenticate(mine); return err == nil })

	// A new token exchanged: the cluster's credential is no longer mine.
	next, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exchange(ctx, next.Token, other); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exchange(ctx, tok.Token, mine); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("repeating an exchange whose credential was replaced: %v, want unauthorized", err)
	}
	if _, err := svc.Exchange(ctx, next.Token, other); err != nil {
		t.Fatalf("repeating the current exchange: %v", err)
	}
	if err := svc.Revoke(ctx, edge); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exchange(ctx, next.Token, other); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("repeating an exchange of a deleted cluster: %v, want unauthorized", err)
	}
}

// Attempts of one exchange that race (the first's handler still running
// when the agent retried) all get the credential; one chosen credential
// is never a second cluster's.
func TestRacingRepeatsOfAnExchange(t *testing.T) {
	t.Parallel()
	svc, _ := start(t, Options{})
	ctx := t.Context()
	tok, err := svc.Register(ctx, edge)
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := NewCredential()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			c, err := svc.Exchange(ctx, tok.Token, mine)
			if err == nil && c.Credential != mine {
				err = errors.New("another credential: " + c.Credential)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a racing repeat: %v", err)
		}
	}
	eventually(t, "the credential authenticates", func() bool { _, _, err := svc.Authenticate(mine); return err == nil })
	second := appcontext.ClusterRef{Provider: "cp", Name: "edge02"}
	tok2, err := svc.Register(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exchange(ctx, tok2.Token, mine); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("another cluster's credential chosen: %v, want conflict", err)
	}
}

func TestCheckChosen(t *testing.T) {
	good, _ := NewCredential()
	for chosen, ok := range map[string]bool{
		"": true, good: true, strings.Repeat("a", MinChosenLength): true, strings.Repeat("a", MaxTokenLength): true,
		strings.Repeat("a", MinChosenLength-1): false, strings.Repeat("a", MaxTokenLength+1): false,
		strings.Repeat("a", 50) + "=": false, strings.Repeat("a", 50) + "/": false, strings.Repeat("a", 50) + " ": false,
		strings.Repeat("é", 30): false,
	} {
		if err := CheckChosen(chosen); (err == nil) != ok || err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("CheckChosen(%q) = %v, want ok %v", chosen, err, ok)
		}
	}
}
