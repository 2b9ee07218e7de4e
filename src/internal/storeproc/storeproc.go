package storeproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/pdeath"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
	"github.com/argus-mc/argus/src/internal/tailbuf"
)

// Info is what a stores process serves. It prints it as one line, prefixed
// with readyPrefix, once every store answers.
type Info struct {
	Etcd  []string `json:"etcd"`
	Mongo string   `json:"mongo,omitempty"`
}

const readyPrefix = "stores: "

// ServeOptions configures Serve.
type ServeOptions struct {
	// Dir holds the stores' data.
	Dir string
	// Mongo starts FerretDB beside etcd.
	Mongo bool
	// Logger; nil discards.
	Logger *logrus.Entry
}

// Serve opens the stores under opts.Dir, writes their Info to ready, and
// serves them until ctx ends.
func Serve(ctx context.Context, opts ServeOptions, ready io.Writer) error {
	if opts.Dir == "" {
		return errors.New("storeproc: a directory is required")
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	etcd, err := etcdstore.Open(octx, etcdstore.Options{DataDir: opts.Dir, Logger: opts.Logger})
	if err != nil {
		return err
	}
	defer func() { _ = etcd.Close() }() // the process ends; the data is a test's
	info := Info{Etcd: etcd.Endpoints()}
	if opts.Mongo {
		m, err := mongostore.Open(octx, mongostore.Options{DataDir: opts.Dir, Logger: opts.Logger})
		if err != nil {
			return err
		}
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			_ = m.Close(sctx) // the process ends; the data is a test's
		}()
		info.Mongo = m.EmbeddedURI()
	}
	line, _ := json.Marshal(info)
	if _, err := fmt.Fprintf(ready, "%s%s\n", readyPrefix, line); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// Options configures Start.
type Options struct {
	// Binary is a program whose "stores" subcommand calls Serve (the
	// simcluster binary).
	Binary string
	// Dir holds the stores' data.
	Dir string
	// Mongo starts FerretDB beside etcd.
	Mongo bool
	// Timeout bounds the start; 0 means 2 minutes.
	Timeout time.Duration
}

// Process is a running stores process.
type Process struct {
	cmd    *exec.Cmd
	info   Info
	child  *pdeath.Child
	stderr *tailbuf.Buffer
	once   sync.Once
}

// Start runs opts.Binary's stores subcommand and returns once the stores
// answer. The process is killed if this one dies first (Linux).
func Start(ctx context.Context, opts Options) (*Process, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	args := []string{"stores", "--dir", opts.Dir}
	if opts.Mongo {
		args = append(args, "--mongo")
	}
	cmd := exec.Command(opts.Binary, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, stderr: tailbuf.New(4 << 10)}
	cmd.Stderr = p.stderr
	infos := make(chan Info, 1)
	// Killed if this process dies (pdeath); the stores' readiness line is
	// read on the goroutine that waits for them.
	p.child, err = pdeath.Start(cmd, func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
				var info Info
				if json.Unmarshal([]byte(rest), &info) == nil {
					select {
					case infos <- info:
					default: // said once already
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", opts.Binary, err)
	}
	t := time.NewTimer(opts.Timeout)
	defer t.Stop()
	select {
	case p.info = <-infos:
		return p, nil
	case <-p.child.Done():
		return nil, fmt.Errorf("the stores process exited: %v: %s", p.child.Err(), p.stderr)
	case <-t.C:
		err = fmt.Errorf("the stores did not start within %s: %s", opts.Timeout, p.stderr)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = p.Stop()
	return nil, err
}

// Info is what the process serves.
func (p *Process) Info() Info { return p.info }

// PID is the process's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop ends the process (SIGTERM, then SIGKILL after 30 s) and waits for it.
func (p *Process) Stop() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-p.child.Done():
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.child.Done()
		}
	})
	var exit *exec.ExitError
	if err := p.child.Err(); err != nil && !errors.As(err, &exit) {
		return err
	}
	if exit != nil && !exit.Success() {
		return fmt.Errorf("the stores process: %v: %s", exit, p.stderr)
	}
	return nil
}
