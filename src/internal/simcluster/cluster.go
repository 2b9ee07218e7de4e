package simcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	podCIDR     = "10.244.0.0/16" // room for thousands of fake pods
	// FakeNodeAnnotation marks the Nodes kwok manages.
	FakeNodeAnnotation = "kwok.x-k8s.io/node"
	// StateAnnotation drives a pod's simulated state: not-ready, crashloop, failed, succeeded, ready.
	StateAnnotation = "sim.argus.io/state"
	// ManualAnnotation makes kwok leave a pod's status to the test.
	ManualAnnotation = "sim.argus.io/manual"
)

// Cluster is one simulated cluster.
type Cluster struct {
	Name string
	// Dir holds the cluster's certificates, kubeconfig and process logs.
	Dir string
	// Kubeconfig authenticates as an admin (system:masters, token auth).
	Kubeconfig     []byte
	KubeconfigPath string
	// Server is the API server's URL.
	Server string

	port        int
	pickPort    func() (int, error)
	nodes       int
	apiOnly     bool
	binDir      string
	etcdServers string
	pki         *pki
	log         *logrus.Entry

	mu        sync.Mutex // guards apiserver, which StopAPIServer/StartAPIServer swap
	apiserver *process
	others    []*process // controller-manager, scheduler, kwok
}

// RESTConfig returns a fresh client configuration for the cluster.
func (c *Cluster) RESTConfig() *rest.Config {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig)
	if err != nil {
		panic(fmt.Sprintf("simcluster: own kubeconfig does not parse: %v", err)) // written by us
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

// Clientset returns a typed client for the cluster.
func (c *Cluster) Clientset() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.RESTConfig())
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// prepare writes the cluster's files: PKI, token file, kwok config, kubeconfig.
func (c *Cluster) prepare() error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	p, err := newPKI()
	if err != nil {
		return fmt.Errorf("%s: pki: %w", c.Name, err)
	}
	c.pki = p
	files := map[string][]byte{
		"ca.crt":        p.caCert,
		"ca.key":        p.caKey,
		"apiserver.crt": p.serverCert,
		"apiserver.key": p.serverKey,
		"sa.pub":        p.saPublic,
		"sa.key":        p.saPrivate,
		"tokens.csv":    []byte(p.token + `,admin,admin,"system:masters"` + "\n"),
		"kwok.yaml":     kwokConfig(),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return fmt.Errorf("%s: write %s: %w", c.Name, name, err)
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig() error {
	c.Server = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.pki.caCert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.pki.token}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin"}
	cfg.CurrentContext = c.Name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	c.Kubeconfig = data
	c.KubeconfigPath = c.path("kubeconfig")
	return os.WriteFile(c.KubeconfigPath, data, 0o600)
}

func (c *Cluster) apiserverProcess() *process {
	p := c.fullAPIServerProcess()
	if c.apiOnly {
		// Lists and watches go to etcd: the watch cache is most of an idle
		// API server's memory.
		p.args = append(p.args, "--watch-cache=false")
		// Its garbage collector works harder instead of letting the heap
		// grow: idle, it needs far less than it would take.
		p.env = append(p.env, "GOMEMLIMIT=96MiB", "GOGC=50")
	}
	return p
}

func (c *Cluster) fullAPIServerProcess() *process {
	return &process{
		name:    "kube-apiserver",
		path:    filepath.Join(c.binDir, "kube-apiserver"),
		logPath: c.path("kube-apiserver.log"),
		args: []string{
			"--etcd-servers=" + c.etcdServers,
			"--etcd-prefix=/" + c.Name,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// The "kubernetes" Endpoints may not hold a loopback address, and
			// nothing runs in-cluster to need them.
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(c.port),
			"--tls-cert-file=" + c.path("apiserver.crt"),
			"--tls-private-key-file=" + c.path("apiserver.key"),
			"--client-ca-file=" + c.path("ca.crt"),
			"--token-auth-file=" + c.path("tokens.csv"),
			// RBAC, as real clusters: a logical cloud's user may only do what
			// its Roles allow. The admin token is in system:masters.
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + c.path("sa.pub"),
			"--service-account-signing-key-file=" + c.path("sa.key"),
			"--service-cluster-ip-range=" + serviceCIDR,
			"--allow-privileged=true",
			// Pods run nowhere, so mounting service-account tokens into them
			// buys nothing; without the plugin a pod created right after its
			// namespace does not race the service-account controller.
			"--disable-admission-plugins=ServiceAccount",
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--v=1",
		},
	}
}

func (c *Cluster) componentProcesses() []*process {
	kc := "--kubeconfig=" + c.KubeconfigPath
	return []*process{
		{
			name: "kube-controller-manager", path: filepath.Join(c.binDir, "kube-controller-manager"),
			logPath: c.path("kube-controller-manager.log"),
			args: []string{kc, "--secure-port=0", "--leader-elect=false", "--cluster-name=" + c.Name,
				"--service-account-private-key-file=" + c.path("sa.key"), "--root-ca-file=" + c.path("ca.crt"),
				// The CSR API's signer: approved requests get certificates from the cluster CA.
				"--cluster-signing-cert-file=" + c.path("ca.crt"), "--cluster-signing-key-file=" + c.path("ca.key"),
				"--use-service-account-credentials=false", "--kube-api-qps=200", "--kube-api-burst=400",
				"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10", "--v=1"},
		},
		{
			name: "kube-scheduler", path: filepath.Join(c.binDir, "kube-scheduler"),
			logPath: c.path("kube-scheduler.log"),
			args:    []string{kc, "--secure-port=0", "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400", "--v=1"},
		},
		{
			name: "kwok", path: filepath.Join(c.binDir, "kwok"),
			logPath: c.path("kwok.log"),
			args:    []string{kc, "--config=" + c.path("kwok.yaml")},
		},
	}
}

// start brings the whole cluster up: API server (on a fresh port if the
// chosen one was taken), then the components, then Ready fake Nodes.
func (c *Cluster) start(ctx context.Context) error {
	if err := c.prepare(); err != nil {
		return err
	}
	pick := c.pickPort
	if pick == nil {
		pick = freePort
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if c.port, err = pick(); err != nil {
			return err
		}
		if err = c.writeKubeconfig(); err != nil {
			return err
		}
		if err = c.StartAPIServer(ctx); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
		c.log.WithField("port", c.port).Warn("API server port taken, trying another")
	}
	if err != nil {
		return err
	}
	if c.apiOnly {
		return nil
	}
	c.others = c.componentProcesses()
	for _, p := range c.others {
		if err := p.start(); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return c.createNodes(ctx)
}

var errPortInUse = errors.New("port already in use")

// StartAPIServer starts the cluster's kube-apiserver on its port and waits
// until it is ready. The objects it serves come back from etcd.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	if c.apiserver != nil && c.apiserver.running() {
		c.mu.Unlock()
		return nil
	}
	p := c.apiserverProcess()
	if err := p.start(); err != nil {
		c.mu.Unlock()
		return err
	}
	c.apiserver = p
	c.mu.Unlock()

	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		select {
		case <-p.exited():
			logTail, _ := os.ReadFile(p.logPath)
			if strings.Contains(string(logTail), "address already in use") {
				return fmt.Errorf("%s: kube-apiserver: %w", c.Name, errPortInUse)
			}
			return fmt.Errorf("%s: kube-apiserver %v; see %s", c.Name, p.exitError(), p.logPath)
		case <-ctx.Done():
			return fmt.Errorf("%s: kube-apiserver not ready: %w (last: %v)", c.Name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond): // poll readiness of an external process
		}
	}
}

// StopAPIServer stops the cluster's kube-apiserver; clients then get
// "connection refused". Other components keep running and reconnect.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p != nil {
		p.stop(10 * time.Second)
	}
}

// stop stops every process of the cluster, the API server last.
func (c *Cluster) stop() {
	var wg sync.WaitGroup
	for _, p := range c.others {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(5 * time.Second) }()
	}
	wg.Wait()
	c.StopAPIServer()
}

// PIDs lists the process ids of the cluster's running processes.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	procs := append([]*process{c.apiserver}, c.others...)
	c.mu.Unlock()
	var pids []int
	for _, p := range procs {
		if p != nil {
			if pid := p.pid(); pid != 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// createNodes registers the fake Nodes and waits for kwok to make them Ready.
func (c *Cluster) createNodes(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	for i := 1; i <= c.nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{FakeNodeAnnotation: "fake"},
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok",
			},
		}}
		// Retried (0.5 to 4 s apart) when the API server says it could
		// not answer in time: the clusters' etcd, on a machine busy with
		// other tests, may answer a first write "request timed out".
		err := retry.OnError(wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 5, Jitter: 0.1}, func(err error) bool {
			return ctx.Err() == nil && (apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
				apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err))
		}, func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil // an attempt that timed out made it after all
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: create node %s: %w", c.Name, name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range nodes.Items {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready >= c.nodes {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d nodes Ready: %w", c.Name, ready, c.nodes, ctx.Err())
		case <-time.After(100 * time.Millisecond): // poll an external process
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// RSS returns the resident memory of the cluster's processes, summed. The
// shared etcd, which runs in the calling process, is not included.
func (c *Cluster) RSS() (int64, error) {
	var total int64
	for _, pid := range c.PIDs() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse VmRSS of %d: %w", pid, err)
				}
				total += kb * 1024
			}
		}
	}
	return total, nil
}
