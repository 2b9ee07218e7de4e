package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Credential is the agent's own credential and the cluster it names. One
// without a cluster is pending: chosen for a join whose answer has not
// come yet, and named again by the next attempt, after a restart too.
type Credential struct {
	Cluster    appcontext.ClusterRef
	Credential string
}

// pending reports a credential chosen for a join not yet answered.
func (c Credential) pending() bool { return c.Cluster == appcontext.ClusterRef{} }

// Credentials keeps the agent's credential across restarts.
type Credentials interface {
	// Load returns the kept credential, pending or not; nil when there is
	// none.
	Load(ctx context.Context) (*Credential, error)
	Save(ctx context.Context, c Credential) error
}

// SecretCredentials keeps the credential in a Secret of the agent's own
// cluster, which the agent's RBAC lets it read and write (and nothing
// else of Secrets).
type SecretCredentials struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
}

var _ Credentials = SecretCredentials{}

const (
	keyProvider   = "clusterProvider"
	keyCluster    = "cluster"
	keyCredential = "credential"
)

// Load reads the Secret.
func (s SecretCredentials) Load(ctx context.Context) (*Credential, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the agent's credential (secret %s/%s): %w", s.Namespace, s.Name, err)
	}
	c := &Credential{Cluster: appcontext.ClusterRef{Provider: string(sec.Data[keyProvider]), Name: string(sec.Data[keyCluster])},
		Credential: string(sec.Data[keyCredential])}
	if c.Credential == "" || (c.Cluster.Provider == "") != (c.Cluster.Name == "") {
		return nil, nil // incomplete: join again
	}
	return c, nil
}

// Save writes the Secret, creating it if needed.
func (s SecretCredentials) Save(ctx context.Context, c Credential) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "argus-agent", "app.kubernetes.io/part-of": "argus"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{keyProvider: []byte(c.Cluster.Provider), keyCluster: []byte(c.Cluster.Name), keyCredential: []byte(c.Credential)},
	}
	_, err := s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = s.Client.CoreV1().Secrets(s.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("keep the agent's credential (secret %s/%s): %w", s.Namespace, s.Name, err)
	}
	return nil
}

// errChosenTaken is a chosen credential the orchestrator knows as another
// cluster's: the join chooses anew.
var errChosenTaken = errors.New("the chosen credential is taken")

// ErrRefused is a join or credential the orchestrator refused: retrying
// does not help, the operator must act (a new join token).
var ErrRefused = errors.New("refused by the orchestrator")

// joinAnswer is POST /v2/fleet/join's answer.
type joinAnswer struct {
	ClusterProvider string `json:"clusterProvider"`
	Cluster         string `json:"cluster"`
	Credential      string `json:"credential"`
}

// maxJoinAnswer bounds what the join request reads back.
const maxJoinAnswer = 64 << 10

// join exchanges the join token for a credential at one orchestrator,
// naming the credential the agent chose (an orchestrator that does not
// know the field makes one and answers it).
func join(ctx context.Context, client *http.Client, e endpoint, token, chosen string) (Credential, error) {
	body, _ := json.Marshal(map[string]string{"token": token, "credential": chosen})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, e.base+"/v2/fleet/join", bytes.NewReader(body))
	if err != nil {
		return Credential{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return Credential{}, fmt.Errorf("join at %s: %w", e.base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJoinAnswer))
	if err != nil {
		return Credential{}, fmt.Errorf("join at %s: %w", e.base, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		return Credential{}, fmt.Errorf("%w: join at %s: %s", errChosenTaken, e.base, firstLine(data))
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
		return Credential{}, fmt.Errorf("%w: join at %s: %d %s", ErrRefused, e.base, resp.StatusCode, firstLine(data))
	default:
		return Credential{}, fmt.Errorf("join at %s: %d %s", e.base, resp.StatusCode, firstLine(data))
	}
	var a joinAnswer
	if err := json.Unmarshal(data, &a); err != nil || a.Credential == "" || a.Cluster == "" || a.ClusterProvider == "" {
		return Credential{}, fmt.Errorf("join at %s: the answer is not a credential", e.base)
	}
	return Credential{Cluster: appcontext.ClusterRef{Provider: a.ClusterProvider, Name: a.Cluster}, Credential: a.Credential}, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
