package render

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/pdeath"
	"github.com/argus-mc/argus/src/internal/tailbuf"
)

// Defaults of PoolOptions.
const (
	DefaultWorkers     = 2
	DefaultMaxRenders  = 200
	DefaultTimeout     = 20 * time.Second
	DefaultMemoryLimit = 512 << 20
)

// PoolOptions configures a Pool. Zero values are the defaults above.
type PoolOptions struct {
	// Command makes the command of a worker from its arguments (WorkerArg
	// first); nil runs this executable, whose main must hand WorkerArg to
	// WorkerMain (the orchestrator's does; tests' TestMain do the same).
	Command func(args []string) *exec.Cmd
	// Workers is the number of warm workers, and so of renders at a time.
	Workers int
	// MaxRenders retires a worker after that many requests, so a slow leak
	// or fragmentation in one never lasts.
	MaxRenders int
	// Timeout bounds one request; the worker is killed when it passes.
	Timeout time.Duration
	// MemoryLimit bounds a worker's heap (and, outside race-detector
	// builds, its address space over what it had at start).
	MemoryLimit int64
	// MaxOutput bounds one render's manifests; 0 means DefaultMaxOutput.
	MaxOutput int64
	// Limits bound the archives the workers open.
	Limits archive.Limits
	// Metrics, when set, records requests and worker starts.
	Metrics *Metrics
	Logger  *logrus.Entry
}

// Pool renders charts in warm child processes, so a hostile chart (an
// endless template loop, a 4 GB output) costs one killed worker and a
// clear error, never the orchestrator's memory or responsiveness. Requests
// of different callers run on different workers in parallel. The chart,
// profile and values travel over a pipe; a worker never opens a file a
// caller names.
type Pool struct {
	opts PoolOptions
	log  *logrus.Entry
	warm chan *worker

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	live   map[*worker]struct{}
	closed bool
	// startErr is the last failure to start a worker, until one starts;
	// startFailed is closed (and replaced) at each such failure.
	startErr    error
	startFailed chan struct{}
}

// NewPool starts opts.Workers workers in the background and returns; a
// request waits for the first one that is ready.
func NewPool(opts PoolOptions) *Pool {
	if opts.Command == nil {
		opts.Command = selfCommand
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MaxRenders <= 0 {
		opts.MaxRenders = DefaultMaxRenders
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	if opts.MaxOutput == 0 {
		opts.MaxOutput = DefaultMaxOutput
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{opts: opts, log: opts.Logger, warm: make(chan *worker, opts.Workers), ctx: ctx, cancel: cancel,
		live: map[*worker]struct{}{}, startFailed: make(chan struct{})}
	for range opts.Workers {
		p.spawn()
	}
	return p
}

func selfCommand(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

// Close kills every worker, busy or idle, and waits for them. Requests in
// flight fail.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	for w := range p.live {
		w.kill()
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// Render renders opts in a worker. A render that outruns the pool's time,
// memory or output limit fails with an error that is both ErrLimit and
// errdefs.ErrInvalid, naming the limit.
func (p *Pool) Render(ctx context.Context, opts Options) ([]Resource, error) {
	req := request{Op: opRender, ChartName: opts.ChartName, ReleaseName: opts.ReleaseName, Namespace: opts.Namespace,
		Overrides: opts.Overrides}
	if opts.Values != nil {
		b, err := json.Marshal(opts.Values)
		if err != nil {
			return nil, errdefs.InvalidWrap(err, "values")
		}
		req.ValuesJSON = b
	}
	resp, err := p.do(ctx, req, opts.Chart, opts.Profile)
	if err != nil {
		return nil, err
	}
	out := make([]Resource, 0, len(resp.Resources))
	for _, r := range resp.Resources {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(r.Manifest); err != nil {
			return nil, fmt.Errorf("decode a rendered %s %s: %w", r.Kind, r.Name, err)
		}
		out = append(out, Resource{GVK: schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
			Name: r.Name, Namespace: r.Namespace, Manifest: r.Manifest, Object: u, Hook: r.Hook})
	}
	return out, nil
}

// CheckChart loads a chart archive in a worker, as LoadChart does, and
// returns the chart's name.
func (p *Pool) CheckChart(ctx context.Context, data []byte, chartName string) (string, error) {
	resp, err := p.do(ctx, request{Op: opChart, ChartName: chartName}, data, nil)
	return resp.ChartName, err
}

// CheckProfile reads a profile archive in a worker, as ProfileValues does.
func (p *Pool) CheckProfile(ctx context.Context, data []byte) error {
	_, err := p.do(ctx, request{Op: opProfile}, nil, data)
	return err
}

func (p *Pool) do(ctx context.Context, req request, chart, profile []byte) (resp response, err error) {
	defer func(start time.Time) { p.opts.Metrics.request(req.Op, start, err) }(time.Now())
	req.Limits, req.MaxOutput = p.opts.Limits, p.opts.MaxOutput
	w, err := p.acquire(ctx)
	if err != nil {
		return response{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	stop := context.AfterFunc(rctx, w.kill)
	resp, err = w.exchange(req, chart, profile, 2*p.opts.MaxOutput+1<<20)
	// stop is false when the timeout already started killing the worker:
	// the answer counts, the worker does not go back to the pool.
	healthy := stop()
	if err == nil {
		p.release(w, healthy)
		if resp.Error != "" {
			return response{}, errorOf(resp)
		}
		return resp, nil
	}
	// The worker is of no further use: find out why, and replace it.
	w.kill()
	<-w.exited
	p.release(w, false)
	switch {
	case p.ctx.Err() != nil:
		return response{}, errdefs.Unavailable(p.ctx.Err(), "the render pool is closed")
	case ctx.Err() != nil:
		return response{}, fmt.Errorf("render: %w", ctx.Err())
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		err = LimitError("rendering took longer than %s, the render time limit", p.opts.Timeout)
	case errors.Is(err, errAnswerTooLarge):
		err = LimitError("rendering produced more than %d bytes of manifests, the render output limit", p.opts.MaxOutput)
	case w.exitCode() == exitMemory || strings.Contains(w.stderr.String(), "out of memory"):
		err = LimitError("rendering needed more than %d MiB of memory, the render memory limit", p.opts.MemoryLimit>>20)
	default:
		err = LimitError("the render worker stopped (%s): %s", w.cmd.ProcessState, w.why())
	}
	p.log.WithFields(logrus.Fields{"op": req.Op, "release": req.ReleaseName}).WithError(err).Warn("render worker killed; a new one replaces it")
	return response{}, err
}

// acquire returns a ready worker, waiting for one while ctx allows. While
// workers fail to start, it fails at once rather than wait for nothing.
func (p *Pool) acquire(ctx context.Context) (*worker, error) {
	for {
		select {
		case w := <-p.warm:
			if p.usable(w) {
				return w, nil
			}
			continue
		default:
		}
		p.mu.Lock()
		startErr, failed := p.startErr, p.startFailed
		p.mu.Unlock()
		if startErr != nil {
			return nil, errdefs.Unavailable(startErr, "no render worker could be started")
		}
		select {
		case w := <-p.warm:
			if p.usable(w) {
				return w, nil
			}
		case <-failed:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a render worker: %w", ctx.Err())
		case <-p.ctx.Done():
			return nil, errdefs.Unavailable(p.ctx.Err(), "the render pool is closed")
		}
	}
}

// usable reports whether a warm worker is still alive, replacing it if not.
func (p *Pool) usable(w *worker) bool {
	select {
	case <-w.exited: // died while idle
		p.release(w, false)
		return false
	default:
		return true
	}
}

// release puts a healthy worker back, or retires it and starts another.
func (p *Pool) release(w *worker, healthy bool) {
	w.requests++
	p.mu.Lock()
	keep := healthy && !p.closed && w.requests < p.opts.MaxRenders
	if !keep {
		delete(p.live, w)
	}
	closed := p.closed
	p.mu.Unlock()
	if keep {
		p.warm <- w // room: at most Workers workers exist
		return
	}
	w.kill()
	if !closed {
		p.spawn()
	}
}

// spawn starts one worker in the background and makes it warm, retrying
// with backoff while starting fails; meanwhile requests fail at once with
// the reason, so nobody waits on a broken binary.
func (p *Pool) spawn() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		retry := backoff.Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Second}
		for {
			w, err := p.start()
			p.mu.Lock()
			if err == nil {
				p.startErr = nil
			} else if p.ctx.Err() == nil {
				p.startErr = err
				close(p.startFailed) // wakes the waiting requests
				p.startFailed = make(chan struct{})
			}
			p.mu.Unlock()
			if err == nil {
				p.warm <- w // room: this slot's worker is gone
				return
			}
			if p.ctx.Err() != nil {
				return
			}
			p.log.WithError(err).Warn("render worker did not start")
			if !retry.Wait(p.ctx) {
				return
			}
		}
	}()
}

// start runs a worker, checks that it answers, and limits its address space.
func (p *Pool) start() (*worker, error) {
	cmd := p.opts.Command(append([]string{WorkerArg}, memoryArg(p.opts.MemoryLimit)...))
	answers, answersW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("render worker pipe: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, answersW)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = answers.Close()
		_ = answersW.Close()
		return nil, fmt.Errorf("render worker stdin: %w", err)
	}
	w := &worker{cmd: cmd, in: stdin, answers: answers, out: bufio.NewReaderSize(answers, 64<<10), stderr: tailbuf.New(4 << 10),
		exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = answers.Close()
		_ = answersW.Close()
		return nil, errors.New("the render pool is closed")
	}
	// Killed if the orchestrator dies (pdeath).
	child, err := pdeath.Start(cmd, nil)
	_ = answersW.Close() // the child has its copy
	if err != nil {
		p.mu.Unlock()
		_ = answers.Close()
		return nil, fmt.Errorf("start render worker: %w", err)
	}
	p.live[w] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		<-child.Done()
		_ = answers.Close()
		close(w.exited)
	}()

	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, w.kill)
	_, err = w.exchange(request{Op: opPing}, nil, nil, 1<<20)
	if !stop() && err == nil {
		err = errors.New("render worker: no answer to the first ping in time")
	}
	if err == nil && p.opts.MemoryLimit > 0 {
		err = limitAddressSpace(cmd.Process.Pid, p.opts.MemoryLimit)
	}
	if err != nil {
		w.kill()
		<-w.exited
		p.mu.Lock()
		delete(p.live, w)
		p.mu.Unlock()
		return nil, fmt.Errorf("render worker did not answer (%w): %s", err, w.why())
	}
	p.opts.Metrics.workerStarted()
	return w, nil
}

// worker is one child process.
type worker struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	answers  *os.File
	out      *bufio.Reader
	stderr   *tailbuf.Buffer
	exited   chan struct{}
	requests int
	killOnce sync.Once
}

var errAnswerTooLarge = errors.New("render worker answer too large")

// exchange sends one request and reads its answer.
func (w *worker) exchange(req request, chart, profile []byte, maxAnswer int64) (response, error) {
	head, err := encode(req)
	if err != nil {
		return response{}, err
	}
	for _, b := range [][]byte{head, chart, profile} {
		if err := writeFrame(w.in, b); err != nil {
			return response{}, fmt.Errorf("send to render worker: %w", err)
		}
	}
	var n [8]byte
	if _, err := io.ReadFull(w.out, n[:]); err != nil {
		return response{}, fmt.Errorf("read from render worker: %w", err)
	}
	size := binary.BigEndian.Uint64(n[:])
	if size > uint64(maxAnswer) {
		return response{}, errAnswerTooLarge
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(w.out, b); err != nil {
		return response{}, fmt.Errorf("read from render worker: %w", err)
	}
	var resp response
	if err := decode(b, &resp); err != nil {
		return response{}, fmt.Errorf("decode render worker answer: %w", err)
	}
	return resp, nil
}

// kill stops the worker; safe to call more than once and concurrently.
func (w *worker) kill() {
	w.killOnce.Do(func() {
		if w.cmd != nil && w.cmd.Process != nil {
			_ = w.cmd.Process.Kill()
		}
		if w.in != nil {
			_ = w.in.Close()
		}
	})
}

// exitCode is the worker's exit code once it has exited, -1 when killed
// by a signal.
func (w *worker) exitCode() int {
	select {
	case <-w.exited:
		return w.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// why is the line of the worker's stderr that says why it stopped: a Go
// runtime's "fatal error:" or "panic:" line, the worker's own, else the
// last line written.
func (w *worker) why() string {
	return cmp.Or(w.stderr.Line("fatal error:", "panic:", "render worker:"), "no diagnostics")
}
