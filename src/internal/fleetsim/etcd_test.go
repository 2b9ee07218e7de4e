package fleetsim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdEndpoint finds the deployment's etcd: the first member ha-up.sh
// lists, or the embedded server's client port among the orchestrator's
// listening loopback sockets ("" when neither is found, e.g. in process).
func (d *deployment) etcdEndpoint() string {
	if d.ha != nil {
		return d.ha.Stores()["e1"].URL
	}
	if d.proc == nil || len(d.pids) != 1 {
		return ""
	}
	for _, port := range listeningPorts(d.pids[0]) {
		if port == d.port {
			continue
		}
		ep := fmt.Sprintf("http://127.0.0.1:%d", port)
		if etcdAnswers(ep) {
			return ep
		}
	}
	return ""
}

// listeningPorts are the TCP ports pid listens on (/proc).
func listeningPorts(pid int) []int {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || fl[3] != "0A" || !inodes[fl[9]] { // 0A: LISTEN
			continue
		}
		if _, hexPort, ok := strings.Cut(fl[1], ":"); ok {
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports = append(ports, int(p))
			}
		}
	}
	return ports
}

func etcdAnswers(ep string) bool {
	// The other ports answer no gRPC: their failures are expected, not logged.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = cli.Status(ctx, ep)
	return err == nil
}

// cpuByProcess is the CPU time (ms) so far of each process of the
// deployment: its replicas, the stores ha-up.sh lists, and this process
// (the agents).
func (d *deployment) cpuByProcess() map[string]int64 {
	out := map[string]int64{}
	for i, pid := range d.pids {
		_, out[fmt.Sprintf("r%d", i+1)] = procUsage(d.tb, pid)
	}
	if d.ha != nil {
		for name, st := range d.ha.Stores() {
			_, out[name] = procUsage(d.tb, st.PID)
		}
	}
	_, out["agents"] = procUsage(d.tb, os.Getpid())
	return out
}

// cpuSince is each process's CPU seconds since before, in name order.
func (d *deployment) cpuSince(before map[string]int64) string {
	now := d.cpuByProcess()
	names := make([]string, 0, len(now))
	for name := range now {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s=%.1f ", name, float64(now[name]-before[name])/1000)
	}
	return strings.TrimSpace(b.String())
}
