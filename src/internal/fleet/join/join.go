package join

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures a Service; Client is required.
type Options struct {
	Client *clientv3.Client
	// Prefix of every key; "" means "/argus".
	Prefix string
	// TokenTTL is how long a join token may be exchanged; 0 means 1h.
	TokenTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Forget, when set, names what else goes with a deleted cluster (its
	// recorded state, its agent's session): deleted in the transaction
	// that deletes its record, so nothing of it outlives the record.
	Forget func(ref appcontext.ClusterRef) []clientv3.Op
	Logger *logrus.Entry
}

// Service registers pull clusters and their agents' credentials.
type Service struct {
	opts Options
	log  *logrus.Entry

	ready chan struct{}
	once  sync.Once

	mu       sync.RWMutex
	clusters map[appcontext.ClusterRef]entry
	byCred   map[string]appcontext.ClusterRef // credential hash → cluster
	onChange []func(ref appcontext.ClusterRef, present bool)
}

type entry struct {
	credential string // hash
	epoch      int64
}

// record is a cluster's record in etcd. Hashes only, never a secret.
type record struct {
	Mode string `json:"mode"`
	// Credential is the sha256 (hex) of the agent's credential; "" until
	// an agent joined.
	Credential string    `json:"credential,omitempty"`
	Token      string    `json:"token,omitempty"` // the id of the join token in force
	Created    time.Time `json:"created"`
	Joined     time.Time `json:"joined,omitzero"`
}

// tokenRecord is a join token in etcd.
type tokenRecord struct {
	Cluster string    `json:"cluster"`
	Secret  string    `json:"secret"` // sha256 (hex) of the secret part
	Expires time.Time `json:"expires"`
	// Spent is the sha256 (hex) of the credential an agent chose when it
	// exchanged the token: the same exchange again (an agent whose answer
	// was lost) gets the same answer until the token expires.
	Spent string `json:"spent,omitempty"`
}

// ModePull is the mode of a cluster whose agent pulls its work.
const ModePull = "pull"

// New returns a Service; Run loads and follows the records.
func New(opts Options) (*Service, error) {
	if opts.Client == nil {
		return nil, errors.New("join: Client is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = "/argus"
	}
	opts.Prefix = strings.TrimSuffix(opts.Prefix, "/")
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	return &Service{opts: opts, log: opts.Logger, ready: make(chan struct{}),
		clusters: map[appcontext.ClusterRef]entry{}, byCred: map[string]appcontext.ClusterRef{}}, nil
}

func (s *Service) clustersPrefix() string { return s.opts.Prefix + "/fleet/clusters/" }
func (s *Service) clusterKey(ref appcontext.ClusterRef) string {
	return s.clustersPrefix() + ref.String()
}

// RecordKey is the etcd key of ref's registration, which exists while
// the cluster is registered; its creation revision (the cluster's epoch)
// changes only when the cluster is deleted and registered again, not as
// its agent joins anew.
func (s *Service) RecordKey(ref appcontext.ClusterRef) string { return s.clusterKey(ref) }

func (s *Service) tokenKey(id string) string { return s.opts.Prefix + "/fleet/tokens/" + id }

// Token is a join token as given to the operator once.
type Token struct {
	Token   string
	Expires time.Time
}

// Credential is what an agent gets for its join token.
type Credential struct {
	Cluster    appcontext.ClusterRef
	Credential string
}

// Register records ref as a pull cluster (if it is not one yet) and
// returns a new join token for it; a token given out before and not yet
// exchanged is void (one exchanged with a chosen credential stays until
// its lease ends, answering only a repeat of that exchange while the
// credential is the cluster's).
func (s *Service) Register(ctx context.Context, ref appcontext.ClusterRef) (Token, error) {
	id, secret, err := newSecret()
	if err != nil {
		return Token{}, err
	}
	now := s.opts.Now().UTC()
	tok := tokenRecord{Cluster: ref.String(), Secret: hash(secret), Expires: now.Add(s.opts.TokenTTL)}
	tokJSON, err := json.Marshal(tok)
	if err != nil {
		return Token{}, err
	}
	ttl := int64(s.opts.TokenTTL/time.Second) + 1
	lease, err := s.opts.Client.Grant(ctx, ttl)
	if err != nil {
		return Token{}, fmt.Errorf("register %s: %w", ref, err)
	}
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := s.opts.Client.Get(ctx, s.clusterKey(ref))
		if err != nil {
			return Token{}, fmt.Errorf("register %s: %w", ref, err)
		}
		rec := record{Mode: ModePull, Created: now}
		var rev int64
		ops := []clientv3.Op{}
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
				return Token{}, fmt.Errorf("cluster record %s: %w", ref, err)
			}
			if rec.Token != "" { // the token given out before is void
				ops = append(ops, clientv3.OpDelete(s.tokenKey(rec.Token)))
			}
		}
		rec.Token = id
		recJSON, err := json.Marshal(rec)
		if err != nil {
			return Token{}, err
		}
		ops = append(ops, clientv3.OpPut(s.clusterKey(ref), string(recJSON)),
			clientv3.OpPut(s.tokenKey(id), string(tokJSON), clientv3.WithLease(lease.ID)))
		txn, err := s.opts.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.clusterKey(ref)), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return Token{}, fmt.Errorf("register %s: %w", ref, err)
		}
		if txn.Succeeded {
			s.log.WithField("cluster", ref.String()).Info("pull cluster registered; join token issued")
			return Token{Token: id + "." + secret, Expires: tok.Expires}, nil
		}
	}
	return Token{}, errdefs.Conflict("cluster %s changed while its join token was issued; try again", ref)
}

// errRefused is the one answer to a token that cannot be exchanged,
// whatever the reason: an attacker learns nothing from it.
var errRefused = errdefs.Unauthorized("the join token is unknown, expired or already used")

// MaxTokenLength bounds a join token or credential as read from a caller.
const MaxTokenLength = 256

// Exchange trades a join token for the agent's credential, once: the
// credential's hash is recorded and the token spent in one transaction, so
// two agents racing with one token never both succeed.
//
// An agent may choose its credential (chosen, CheckChosen's form; "" has
// one made here). Then the exchange can be repeated with the same token
// and credential until the token expires, and answers the same: an agent
// whose answer was lost (a timeout, a cut connection, with thousands
// joining at once) would otherwise find its token spent and stay out for
// good. A token exchanged without a chosen credential is deleted.
func (s *Service) Exchange(ctx context.Context, token, chosen string) (Credential, error) {
	id, secret, ok := strings.Cut(strings.TrimSpace(token), ".")
	if !ok || id == "" || len(token) > MaxTokenLength || strings.ContainsAny(id, "/") {
		return Credential{}, errRefused
	}
	if err := CheckChosen(chosen); err != nil {
		return Credential{}, err
	}
	// A repeated exchange may race the first (its handler still running
	// after the agent gave up on it): the loser of the transaction reads
	// again and finds the token spent for its own credential.
	for range 3 {
		cred, done, err := s.exchange(ctx, id, secret, chosen)
		if done || err != nil {
			return cred, err
		}
	}
	return Credential{}, errRefused
}

// exchange is one attempt of Exchange; done is false when its transaction
// lost a race and the token is worth reading again.
func (s *Service) exchange(ctx context.Context, id, secret, chosen string) (Credential, bool, error) {
	resp, err := s.opts.Client.Get(ctx, s.tokenKey(id))
	if err != nil {
		return Credential{}, true, fmt.Errorf("join: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Credential{}, true, errRefused
	}
	var tok tokenRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &tok); err != nil {
		return Credential{}, true, errRefused
	}
	if subtle.ConstantTimeCompare([]byte(tok.Secret), []byte(hash(secret))) != 1 || !s.opts.Now().Before(tok.Expires) {
		return Credential{}, true, errRefused
	}
	ref, err := appcontext.ParseClusterRef(tok.Cluster)
	if err != nil {
		return Credential{}, true, errRefused
	}
	// The record as of the token's read: a transaction between the two
	// reads would otherwise show a token not spent beside the record its
	// spending wrote.
	cresp, err := s.opts.Client.Get(ctx, s.clusterKey(ref), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return Credential{}, true, fmt.Errorf("join: %w", err)
	}
	if len(cresp.Kvs) == 0 {
		return Credential{}, true, errRefused
	}
	var rec record
	if err := json.Unmarshal(cresp.Kvs[0].Value, &rec); err != nil {
		return Credential{}, true, errRefused
	}
	if tok.Spent != "" {
		// Spent: the same exchange again is answered as it was, while the
		// credential it gave is the cluster's.
		if chosen != "" && subtle.ConstantTimeCompare([]byte(tok.Spent), []byte(hash(chosen))) == 1 && rec.Credential == tok.Spent {
			return Credential{Cluster: ref, Credential: chosen}, true, nil
		}
		return Credential{}, true, errRefused
	}
	if rec.Token != id {
		return Credential{}, true, errRefused
	}
	cred := chosen
	if cred == "" {
		if _, cred, err = newSecret(); err != nil {
			return Credential{}, true, err
		}
	} else if other, taken := s.credentialOwner(hash(chosen)); taken && other != ref {
		// One credential for two clusters would be one identity for both.
		return Credential{}, true, errdefs.Conflict("the chosen agent credential is another cluster's: choose one from crypto/rand")
	}
	rec.Token, rec.Credential, rec.Joined = "", hash(cred), s.opts.Now().UTC()
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return Credential{}, true, err
	}
	spend := clientv3.OpDelete(s.tokenKey(id))
	if chosen != "" {
		tok.Spent = rec.Credential
		tokJSON, err := json.Marshal(tok)
		if err != nil {
			return Credential{}, true, err
		}
		spend = clientv3.OpPut(s.tokenKey(id), string(tokJSON), clientv3.WithIgnoreLease()) // gone with its lease, at its expiry
	}
	txn, err := s.opts.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.tokenKey(id)), "=", resp.Kvs[0].ModRevision),
		clientv3.Compare(clientv3.ModRevision(s.clusterKey(ref)), "=", cresp.Kvs[0].ModRevision),
	).Then(spend, clientv3.OpPut(s.clusterKey(ref), string(recJSON))).Commit()
	if err != nil {
		return Credential{}, true, fmt.Errorf("join: %w", err)
	}
	if !txn.Succeeded {
		if chosen == "" {
			return Credential{}, true, errRefused // without a chosen credential a lost race is final
		}
		return Credential{}, false, nil
	}
	s.log.WithField("cluster", ref.String()).Info("agent joined; its credential replaces any earlier one")
	return Credential{Cluster: ref, Credential: cred}, true, nil
}

// credentialOwner is the cluster a credential's hash belongs to, as this
// replica knows it.
func (s *Service) credentialOwner(h string) (appcontext.ClusterRef, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ref, ok := s.byCred[h]
	return ref, ok
}

// MinChosenLength is the shortest credential an agent may choose: 256
// bits in unpadded base64url, as the credentials made here.
const MinChosenLength = 43

// CheckChosen says whether an agent's chosen credential has the form of
// one: empty (none chosen), or MinChosenLength to MaxTokenLength
// characters of unpadded base64url. An agent makes it of crypto/rand, as
// NewCredential does; the form is all the orchestrator can check.
func CheckChosen(chosen string) error {
	if chosen == "" {
		return nil
	}
	base64URL := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
	}
	if len(chosen) < MinChosenLength || len(chosen) > MaxTokenLength || strings.IndexFunc(chosen, func(r rune) bool { return !base64URL(r) }) >= 0 {
		return errdefs.Invalid("a chosen agent credential is %d to %d characters of unpadded base64url", MinChosenLength, MaxTokenLength)
	}
	return nil
}

// NewCredential makes a credential for an agent to choose: 256 random
// bits, unpadded base64url.
func NewCredential() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("join: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Authenticate returns the cluster a credential belongs to and the
// cluster's epoch (the revision its record was created at), from memory.
func (s *Service) Authenticate(credential string) (appcontext.ClusterRef, int64, error) {
	if credential == "" || len(credential) > MaxTokenLength {
		return appcontext.ClusterRef{}, 0, errdefs.Unauthorized("no valid agent credential")
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ref, ok := s.byCred[hash(credential)]
	if !ok {
		return appcontext.ClusterRef{}, 0, errdefs.Unauthorized("the agent credential is unknown or revoked")
	}
	return ref, s.clusters[ref].epoch, nil
}

// Revoke deletes ref's record, any join token not yet exchanged and what
// Options.Forget names, in one transaction: its
// agent's credential stops working on every replica as soon as they see
// the deletion (a spent token left until its lease ends answers nothing
// once the record is gone).
func (s *Service) Revoke(ctx context.Context, ref appcontext.ClusterRef) error {
	resp, err := s.opts.Client.Get(ctx, s.clusterKey(ref))
	if err != nil {
		return fmt.Errorf("revoke %s: %w", ref, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	ops := []clientv3.Op{clientv3.OpDelete(s.clusterKey(ref))}
	var rec record
	if json.Unmarshal(resp.Kvs[0].Value, &rec) == nil && rec.Token != "" {
		ops = append(ops, clientv3.OpDelete(s.tokenKey(rec.Token)))
	}
	if s.opts.Forget != nil {
		ops = append(ops, s.opts.Forget(ref)...)
	}
	if _, err := s.opts.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("revoke %s: %w", ref, err)
	}
	s.log.WithField("cluster", ref.String()).Info("pull cluster deleted; its agent's credential is revoked")
	return nil
}

// Pulls reports whether ref is a registered pull cluster.
func (s *Service) Pulls(ref appcontext.ClusterRef) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.clusters[ref]
	return ok
}

// Clusters lists the registered pull clusters.
func (s *Service) Clusters() []appcontext.ClusterRef {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]appcontext.ClusterRef, 0, len(s.clusters))
	for ref := range s.clusters {
		out = append(out, ref)
	}
	return out
}

// OnChange registers f to be told of each cluster registered (present)
// or deleted; it runs on the watch goroutine and must not block. Register
// before Run.
func (s *Service) OnChange(f func(ref appcontext.ClusterRef, present bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

// Ready is closed once the records are loaded.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run loads the records and follows them until ctx ends (etcdwatch: a
// broken watch is listed again, and a record deleted meanwhile comes as a
// deletion).
func (s *Service) Run(ctx context.Context) error {
	f, err := etcdwatch.New(etcdwatch.Options{Client: s.opts.Client, Prefixes: []string{s.clustersPrefix()}, Name: "pull clusters",
		Logger: s.log, Apply: func(b etcdwatch.Batch) {
			for _, ev := range b.Events {
				if ev.Deleted {
					if ref, err := appcontext.ParseClusterRef(strings.TrimPrefix(ev.Key, s.clustersPrefix())); err == nil {
						s.remove(ref)
					}
					continue
				}
				s.set(ev.Key, ev.Value, ev.CreateRevision)
			}
			if b.First {
				s.once.Do(func() { close(s.ready) })
			}
		}})
	if err != nil {
		return err
	}
	f.Run(ctx)
	return nil
}

func (s *Service) set(key string, value []byte, created int64) {
	ref, err := appcontext.ParseClusterRef(strings.TrimPrefix(key, s.clustersPrefix()))
	if err != nil {
		return
	}
	var rec record
	if err := json.Unmarshal(value, &rec); err != nil {
		s.log.WithError(err).WithField("cluster", ref.String()).Warn("malformed pull cluster record ignored")
		return
	}
	s.mu.Lock()
	old, existed := s.clusters[ref]
	if existed && old.credential != "" {
		delete(s.byCred, old.credential)
	}
	s.clusters[ref] = entry{credential: rec.Credential, epoch: created}
	if rec.Credential != "" {
		s.byCred[rec.Credential] = ref
	}
	listeners := s.onChange
	s.mu.Unlock()
	if !existed || old.credential != rec.Credential {
		for _, f := range listeners {
			f(ref, true)
		}
	}
}

func (s *Service) remove(ref appcontext.ClusterRef) {
	s.mu.Lock()
	old, existed := s.clusters[ref]
	if existed {
		delete(s.clusters, ref)
		if old.credential != "" {
			delete(s.byCred, old.credential)
		}
	}
	listeners := s.onChange
	s.mu.Unlock()
	if existed {
		for _, f := range listeners {
			f(ref, false)
		}
	}
}

// newSecret returns a random id (12 hex digits) and secret (256 bits).
func newSecret() (id, secret string, err error) {
	var b [6 + 32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("join: random: %w", err)
	}
	return hex.EncodeToString(b[:6]), base64.RawURLEncoding.EncodeToString(b[6:]), nil
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
