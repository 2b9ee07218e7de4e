package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	joinsvc "github.com/argus-mc/argus/src/internal/fleet/join"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures an Agent; Orchestrators, Cluster and Credentials are
// required.
type Options struct {
	// Orchestrators are the URLs to dial: one picked at random, and after
	// a failure another picked at random, so that a fleet's agents spread
	// over the replicas they name (a name with several addresses is one
	// URL: gRPC dials its addresses in the resolver's order).
	Orchestrators []string
	// RootCAs verify https orchestrators; nil means the system's.
	RootCAs *x509.CertPool
	// JoinToken is exchanged for a credential when none is kept.
	JoinToken   string
	Cluster     Cluster
	Credentials Credentials
	// BackoffBase and BackoffMax bound the wait between connection
	// attempts (jittered); 0 means 250ms and 4s, so a link that comes back
	// is used again within seconds.
	BackoffBase, BackoffMax time.Duration
	// Version is reported to the orchestrator.
	Version string
	Logger  *logrus.Entry
}

// Agent is a pull cluster's agent.
type Agent struct {
	opts      Options
	log       *logrus.Entry
	endpoints []endpoint
	first     int // the endpoint tried first
	http      *http.Client
	work      *workState
	up        *uplink

	mu        sync.Mutex
	epoch     int64
	connected bool
	grpcOnly  map[int]time.Time // endpoints that did not speak the framed stream, and when
}

// New checks opts and returns an Agent.
func New(opts Options) (*Agent, error) {
	if opts.Cluster == nil || opts.Credentials == nil || len(opts.Orchestrators) == 0 {
		return nil, errors.New("agent: Orchestrators, Cluster and Credentials are required")
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 250 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 4 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	a := &Agent{opts: opts, log: opts.Logger, work: newWorkState(), up: newUplink(), grpcOnly: map[int]time.Time{}}
	for _, raw := range opts.Orchestrators {
		e, err := parseEndpoint(raw, opts.RootCAs)
		if err != nil {
			return nil, err
		}
		a.endpoints = append(a.endpoints, e)
	}
	// Agents given every replica's URL would otherwise all stream to the
	// first: one replica holding the fleet's sessions, and its loss moving
	// all of them at once.
	a.first = rand.IntN(len(a.endpoints))
	// No ServerName: the transport verifies each URL's own host (the
	// first URL's name would fail every other replica's certificate).
	a.http = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: opts.RootCAs},
		ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second},
		// The join is never redirected: a 307 or 308 would send the join
		// token, in its body, wherever the answer points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return a, nil
}

// next is the endpoint to try after endpoint cur failed or its stream
// ended: another one picked at random, so that the agents of a replica
// that went away spread over the others (in turn, they would all go to
// the same one, and a rolling restart would gather the fleet there).
func (a *Agent) next(cur int) int {
	n := len(a.endpoints)
	if n == 1 {
		return 0
	}
	return (cur + 1 + rand.IntN(n-1)) % n
}

// Connected reports whether a stream to an orchestrator is up.
func (a *Agent) Connected() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connected
}

// Run joins if needed, runs the cluster side and keeps a stream to an
// orchestrator until ctx ends. It returns an error wrapping ErrRefused
// when the join or the credential is refused.
func (a *Agent) Run(ctx context.Context) error {
	cred, joinedAt, err := a.credential(ctx)
	if err != nil {
		return err
	}
	log := a.log.WithField("cluster", cred.Cluster.String())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	clusterErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		clusterErr <- a.opts.Cluster.Run(cctx, a.up)
	}()
	defer wg.Wait()
	defer cancel()
	joinedNow := false
	retry := a.retry()
	for cur := a.first; ; cur = a.next(cur) {
		select {
		case err := <-clusterErr: // the cluster side ended on its own
			if ctx.Err() != nil { // or with ctx, while a reconnect waited
				return nil
			}
			if err == nil {
				err = errors.New("the agent's cluster side stopped")
			}
			return err
		default:
		}
		e := a.endpoints[cur]
		start := time.Now()
		err := a.session(cctx, cur, e, cred, log)
		switch {
		case cctx.Err() != nil:
			select {
			case err := <-clusterErr:
				if err != nil && ctx.Err() == nil {
					return err
				}
			default:
			}
			return nil
		case status.Code(err) == codes.Unauthenticated && time.Since(joinedAt) < freshCredential:
			// A credential just issued: replicas learn it through their
			// watch of etcd, which lags behind the join when many agents
			// join at once. Joining again would spend the token for good.
			log.WithError(err).Info("the new credential is not known yet; retrying")
		case status.Code(err) == codes.Unauthenticated && a.opts.JoinToken != "" && !joinedNow:
			// The cluster was registered anew: a new token may be given.
			log.WithError(err).Warn("the kept credential was refused; joining again with the join token")
			if cred, err = a.join(cctx, &cred); err != nil {
				return err
			}
			joinedNow, joinedAt = true, time.Now()
			continue
		case status.Code(err) == codes.Unauthenticated, status.Code(err) == codes.PermissionDenied:
			return fmt.Errorf("%w: %v (the cluster was deleted or joined anew; give the agent a new join token)", ErrRefused, err)
		}
		if time.Since(start) > 30*time.Second {
			retry.Reset() // the stream lasted: the next failure starts afresh
		}
		d := retry.Next()
		log.WithError(err).WithFields(logrus.Fields{"orchestrator": e.base, "retry_in": d.Round(time.Millisecond).String()}).Info("no stream to the orchestrator; reconnecting")
		if !backoff.Sleep(cctx, d) {
			continue
		}
	}
}

// Join makes sure a credential is kept, as Run does before its first
// stream: it loads the kept one, or exchanges the join token at the first
// orchestrator that answers, retrying with the agent's backoff, and
// returns the cluster the credential is for. It returns an error wrapping
// ErrRefused when the token is refused.
func (a *Agent) Join(ctx context.Context) (appcontext.ClusterRef, error) {
	c, _, err := a.credential(ctx)
	return c.Cluster, err
}

// retry is the wait between connection attempts: doubling from
// BackoffBase, jittered by a quarter so agents cut off together do not all
// come back at once, and never longer than BackoffMax.
func (a *Agent) retry() backoff.Backoff {
	return backoff.Backoff{Base: a.opts.BackoffBase, Max: a.opts.BackoffMax * 4 / 5, Jitter: 0.25}
}

// freshCredential is how long a credential just issued may be refused
// (a replica has not seen it yet) before the agent takes the refusal as
// final.
const freshCredential = 30 * time.Second

// credential loads the kept credential, or joins with the token; joined
// is when it joined (zero for a kept credential).
func (a *Agent) credential(ctx context.Context) (c Credential, joined time.Time, err error) {
	kept, err := a.opts.Credentials.Load(ctx)
	if err != nil {
		return Credential{}, time.Time{}, err
	}
	if kept != nil && !kept.pending() {
		return *kept, time.Time{}, nil
	}
	if a.opts.JoinToken == "" {
		if kept != nil {
			return Credential{}, time.Time{}, fmt.Errorf("%w: the kept credential waits for its join to be answered, and no join token was given", ErrRefused)
		}
		return Credential{}, time.Time{}, fmt.Errorf("%w: no credential is kept and no join token was given", ErrRefused)
	}
	c, err = a.join(ctx, kept)
	return c, time.Now(), err
}

// join exchanges the join token at the first orchestrator that answers,
// and keeps the credential; kept is what the agent keeps now (nil: none).
// A refused token ends it at once. Every attempt names the same
// credential, of the agent's choosing: an attempt whose answer was lost
// spent the token, and the next is then answered the same
// (join.Service.Exchange) instead of refused. For a first join the choice
// is kept (pending) before the first attempt, so a restart names it
// again; a joined credential is never replaced by a pending one (a
// re-join that is refused leaves the agent what it had).
func (a *Agent) join(ctx context.Context, kept *Credential) (Credential, error) {
	chosen, err := a.choose(ctx, kept)
	if err != nil {
		return Credential{}, err
	}
	// The join's connection is of no further use (the stream dials its
	// own): kept, it would hold a slot of the orchestrator's connection
	// cap, and its memory, until the orchestrator's idle timeout — for
	// every agent of a fleet joining at once.
	defer a.http.CloseIdleConnections()
	retry := a.retry()
	for cur := a.first; ; cur = a.next(cur) {
		e := a.endpoints[cur]
		c, err := join(ctx, a.http, e, a.opts.JoinToken, chosen)
		if err == nil {
			if err := a.opts.Credentials.Save(ctx, c); err != nil {
				return Credential{}, err
			}
			a.log.WithField("cluster", c.Cluster.String()).Info("joined the orchestrator; credential kept")
			return c, nil
		}
		if errors.Is(err, ErrRefused) {
			return Credential{}, err
		}
		if errors.Is(err, errChosenTaken) { // another cluster's: never with crypto/rand, unless a Secret was copied
			if kept != nil && kept.pending() {
				kept = nil // that choice is spoilt: keep the next instead
			}
			fresh, cerr := a.choose(ctx, kept)
			if cerr != nil {
				return Credential{}, cerr
			}
			chosen = fresh
		}
		a.log.WithError(err).Warn("cannot join yet; retrying")
		if !retry.Wait(ctx) {
			return Credential{}, ctx.Err()
		}
	}
}

// choose is the credential a join names: a pending one kept, or a new
// one, kept pending unless a joined credential is kept.
func (a *Agent) choose(ctx context.Context, kept *Credential) (string, error) {
	if kept != nil && kept.pending() {
		return kept.Credential, nil
	}
	chosen, err := joinsvc.NewCredential()
	if err != nil {
		return "", err
	}
	if kept == nil {
		if err := a.opts.Credentials.Save(ctx, Credential{Credential: chosen}); err != nil {
			return "", err
		}
	}
	return chosen, nil
}

// session runs one stream until it fails or ctx ends.
func (a *Agent) session(ctx context.Context, cur int, e endpoint, cred Credential, log *logrus.Entry) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, closeStream, err := a.open(sctx, cur, e, cred)
	if err != nil {
		return err
	}
	defer closeStream()
	a.mu.Lock()
	epoch := a.epoch
	a.mu.Unlock()
	a.work.reconnected()
	hello := &pb.Hello{ClusterProvider: cred.Cluster.Provider, Cluster: cred.Cluster.Name, WorkRevision: a.work.Revision(),
		StatusEpoch: epoch, AgentVersion: a.opts.Version}
	if err := stream.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: hello}}); err != nil {
		return recvErr(stream, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	w := first.GetWelcome()
	if w == nil {
		return errors.New("the orchestrator did not answer with a Welcome")
	}
	a.welcome(w)
	if q, ok := stream.(interface{ SetQuiet(time.Duration) }); ok {
		q.SetQuiet(hubQuiet(w.GetHeartbeatSeconds()))
	}
	log = log.WithFields(logrus.Fields{"orchestrator": e.base, "session": w.GetSession()})
	log.WithField("work_revision", hello.WorkRevision).Info("connected to the orchestrator")
	a.setConnected(true)
	defer a.setConnected(false)
	defer a.up.disconnected()
	c := &conn{a: a, stream: stream, log: log, wake: make(chan struct{}, 1),
		heartbeat: time.Duration(max(1, w.GetHeartbeatSeconds())) * time.Second}
	sendErr := make(chan error, 1)
	go func() {
		err := c.sendLoop(sctx)
		if err != nil {
			cancel() // a stream that cannot send is over: receive returns
		}
		sendErr <- err
	}()
	err = c.receive() // a stream ends with an error, EOF included
	cancel()
	if serr := <-sendErr; serr != nil {
		log.WithError(serr).Info("sending failed; the stream ends")
	}
	return err
}

// recvErr is the stream's real error after a failed Send (the status
// comes with Recv).
func recvErr(stream pb.Fleet_ConnectClient, err error) error {
	if _, rerr := stream.Recv(); rerr != nil {
		return rerr
	}
	return err
}

func (a *Agent) welcome(w *pb.Welcome) {
	a.mu.Lock()
	changed := a.epoch != w.GetStatusEpoch()
	a.epoch = w.GetStatusEpoch()
	a.mu.Unlock()
	if changed {
		a.up.resendAll()
	}
}

func (a *Agent) setConnected(v bool) {
	a.mu.Lock()
	a.connected = v
	a.mu.Unlock()
}

// maxMessage bounds one message either way, as the hub does.
const maxMessage = 4 << 20
