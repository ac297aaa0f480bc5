package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"evals.si/sandbox"
	"evals.si/sandbox/pod/internal/helper"
)

// pollEvery is how often Create and Close look at the pod; helperGrace is
// how long past a command's timeout the rung waits for the helper's word.
const (
	pollEvery   = 200 * time.Millisecond
	helperGrace = 30 * time.Second
)

// Sandbox is one pod.
type Sandbox struct {
	r        *Rung
	cfg      sandbox.Config
	name, id string
	proxy    string // HTTP(S)_PROXY target, "" under deny
	notes    []string
	life     *sandbox.Lifecycle
	// stop ends the services' streams when the sandbox closes.
	stop   context.CancelFunc
	svcCtx context.Context
	svcs   sync.WaitGroup
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Create makes the sandbox's NetworkPolicy, then its pod, and waits until
// the pod's sandbox container runs.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	var notes []string
	if cfg.Image == "" && r.o.DefaultImage != "" {
		cfg.Image = r.o.DefaultImage
		notes = append(notes, "the environment names no image: the pool's default image "+cfg.Image+" runs it")
	}
	if cfg.Image == "" {
		return nil, fmt.Errorf("creating a pod sandbox: the environment names no image and the pool has no default image: set environment.image to a reference the cluster can pull, or give the pool one (evalsid sandboxd --pod-default-image, SandboxClass spec.defaultImage)")
	}
	if len(cfg.Layers) > 0 {
		return nil, fmt.Errorf("creating a pod sandbox: the pod rung cannot start from snapshot layers (it does not snapshot; setup runs once per trial)")
	}
	if cfg.Workdir == "" {
		cfg.Workdir = sandbox.DefaultWorkdir
	}
	if cfg.Policy.Network == "" {
		cfg.Policy.Network = sandbox.NetworkDeny
	}
	host, err := sandbox.NewHostname()
	if err != nil {
		return nil, fmt.Errorf("creating a pod sandbox: %w", err)
	}
	id := host
	name := "evalsi-" + id
	s := &Sandbox{r: r, cfg: cfg, name: name, id: id, notes: notes, life: sandbox.NewLifecycle(Name)}
	if cfg.Policy.Network != sandbox.NetworkDeny {
		_, _, addr, err := r.proxyAddr(cfg)
		if err != nil {
			return nil, fmt.Errorf("creating a pod sandbox: %w", err)
		}
		s.proxy = addr
	}
	np, err := r.networkPolicy(name, id, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a pod sandbox: %w", err)
	}
	pod := r.podSpec(name, id, cfg)
	pod.Spec.Hostname = host
	// The policy first: the pod is never up without it.
	if _, err := r.cs.NetworkingV1().NetworkPolicies(r.o.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating the NetworkPolicy of pod sandbox %s in namespace %s: %w", name, r.o.Namespace, err)
	}
	_, err = r.cs.CoreV1().Pods(r.o.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil {
		err = s.waitRunning(ctx)
	}
	if err != nil {
		// Removed even when ctx ended, within a bound of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := s.remove(cctx); rerr != nil {
			r.log.Warn("removing a pod sandbox that did not start", "pod", name, "err", rerr)
		}
		return nil, fmt.Errorf("creating pod sandbox %s in namespace %s: %w", name, r.o.Namespace, err)
	}
	s.svcCtx, s.stop = context.WithCancel(context.Background())
	r.log.Debug("pod sandbox created", "pod", name, "image", cfg.Image)
	return s, nil
}

// waitRunning polls the pod until its sandbox container runs, failing
// early on what will not resolve by waiting (an image that cannot be
// pulled, a container that ended).
func (s *Sandbox) waitRunning(ctx context.Context) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		p, err := s.r.cs.CoreV1().Pods(s.r.o.Namespace).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("waiting for the pod to run: %w", err)
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return fmt.Errorf("the pod ended (%s) before it ran: %s", p.Status.Phase, statusDetail(p))
		}
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil {
				switch w.Reason {
				case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
					return fmt.Errorf("container %s of the pod cannot start: %s: %s", cs.Name, w.Reason, w.Message)
				}
			}
			if term := cs.State.Terminated; term != nil && cs.Name == containerSandbox {
				return fmt.Errorf("the sandbox container ended (exit %d, %s): %s", term.ExitCode, term.Reason, term.Message)
			}
			if cs.Name == containerSandbox && cs.State.Running != nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the pod to run: %w (last status: %s)", ctx.Err(), statusDetail(p))
		case <-t.C:
		}
	}
}

func statusDetail(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, "; %s: %s", c.Type, c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			fmt.Fprintf(&b, "; %s waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil {
			fmt.Fprintf(&b, "; %s terminated: exit %d %s %s", cs.Name, t.ExitCode, t.Reason, t.Message)
		}
	}
	return b.String()
}

// Name is the pod's name.
func (s *Sandbox) Name() string { return s.name }

// env is a command's whole environment: the config's, the proxy's, the
// request's.
func (s *Sandbox) env(req map[string]string) ([]string, error) {
	cfgEnv := map[string]string{}
	if s.proxy != "" {
		u := "http://" + s.proxy
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			cfgEnv[k] = u
		}
	}
	for k, v := range s.cfg.Env {
		cfgEnv[k] = v
	}
	return sandbox.CommandEnv(cfgEnv, req)
}

func (s *Sandbox) user(u string) string {
	if u == "" {
		u = s.cfg.User
	}
	return u
}

// Exec runs argv in the pod through the helper.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if len(req.Argv) == 0 {
		return res, fmt.Errorf("pod exec: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return res, err
	}
	defer s.life.End()
	timeout := sandbox.CommandTimeout(s.cfg, req)
	// The helper enforces the timeout; this bounds a helper that cannot.
	ctx, cancelT := context.WithTimeout(ctx, timeout+helperGrace)
	defer cancelT()
	ctx, cancel := s.closing(ctx)
	defer cancel()
	env, err := s.env(req.Env)
	if err != nil {
		return res, err
	}
	limit := sandbox.OutputLimit(req)
	hreq := helper.Request{
		Op: helper.OpExec, Argv: req.Argv, Env: env, User: s.user(req.User),
		Workdir: sandbox.InSandboxPath(s.cfg.Workdir, req.Workdir), Timeout: timeout,
		OutputLimit: limit, FileSizeMB: s.r.limits(s.cfg.Limits).FileSizeMB, Stdin: len(req.Stdin) > 0,
	}
	// The helper's frames arrive as the command writes; the stream gives
	// them to req.Output from a goroutine of its own, and is stopped
	// before Exec returns, whichever way.
	out := sandbox.NewOutputStream(limit, req.Output)
	defer out.Stop()
	start := time.Now()
	hres, err := s.call(ctx, hreq, req.Stdin, func(kind byte, p []byte) {
		switch kind {
		case helper.FrameStdout:
			out.Stdout().Write(p)
		case helper.FrameStderr:
			out.Stderr().Write(p)
		}
	})
	res.Duration = time.Since(start)
	var died *helperDied
	if errors.As(err, &died) {
		// A command as root may kill its own helper: like a killed
		// docker exec, that is the command's result, not the sandbox
		// failing. Init kills what it left running.
		fmt.Fprintf(out.Stderr(), "\nevalsi: the command's exec helper ended with status %d before reporting (killed from inside the sandbox?)\n", died.code)
		res.ExitCode = died.code
		res.Stdout, res.Stderr = out.Bytes()
		res.Truncated = out.Truncated()
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("pod exec in %s: %w", s.name, err)
	}
	if hres.Error != "" {
		return res, fmt.Errorf("pod exec in %s: %s", s.name, hres.Error)
	}
	res.ExitCode, res.TimedOut = hres.ExitCode, hres.TimedOut
	res.Stdout, res.Stderr = out.Bytes()
	res.Truncated = hres.Truncated || out.Truncated()
	if res.TimedOut {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("killed after %s", timeout)})
	}
	if hres.Signal == "SIGXFSZ" {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "fsize", Detail: fmt.Sprintf("file size limit %d MiB exceeded (SIGXFSZ)", hreq.FileSizeMB)})
	}
	if hres.OOMKills > 0 {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "oom", Detail: fmt.Sprintf("%d process(es) killed at the pod's memory limit %d MiB", hres.OOMKills, s.r.limits(s.cfg.Limits).MemoryMB)})
	}
	return res, nil
}

// closing is ctx, also cancelled when the sandbox starts closing.
func (s *Sandbox) closing(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.life.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ReadFile reads a file through the helper, as root.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := s.life.Begin(); err != nil {
		return nil, err
	}
	defer s.life.End()
	ctx, cancel := s.closing(ctx)
	defer cancel()
	p := sandbox.InSandboxPath(s.cfg.Workdir, path)
	var buf bytes.Buffer
	over := false
	hres, err := s.call(ctx, helper.Request{Op: helper.OpRead, Path: p}, nil, func(kind byte, b []byte) {
		if kind == helper.FrameStdout && !over {
			if buf.Len()+len(b) > sandbox.MaxReadFile {
				over = true
				return
			}
			buf.Write(b)
		}
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading %s from pod sandbox %s: %w", p, s.name, err)
	case hres.NotExist:
		return nil, fmt.Errorf("reading %s from pod sandbox %s: %w", p, s.name, fs.ErrNotExist)
	case hres.Error != "":
		return nil, fmt.Errorf("reading %s from pod sandbox %s: %s", p, s.name, hres.Error)
	case over:
		return nil, fmt.Errorf("reading %s from pod sandbox %s: larger than the %d MiB read cap", p, s.name, sandbox.MaxReadFile>>20)
	}
	return buf.Bytes(), nil
}

// WriteFile writes a file through the helper, as root.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if err := s.life.Begin(); err != nil {
		return err
	}
	defer s.life.End()
	ctx, cancel := s.closing(ctx)
	defer cancel()
	p := sandbox.InSandboxPath(s.cfg.Workdir, path)
	hres, err := s.call(ctx, helper.Request{Op: helper.OpWrite, Path: p, Mode: uint32(mode.Perm())}, data, nil)
	if err == nil && hres.Error != "" {
		err = errors.New(hres.Error)
	}
	if err != nil {
		return fmt.Errorf("writing %s to pod sandbox %s: %w", p, s.name, err)
	}
	return nil
}

// StartService runs req as a long-lived command: its pod exec stays open
// until it exits or the sandbox closes; Execs do not kill it.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("pod service: empty argv")
	}
	if err := s.life.Usable(); err != nil {
		return nil, err
	}
	env, err := s.env(req.Env)
	if err != nil {
		return nil, err
	}
	hreq := helper.Request{
		Op: helper.OpService, Argv: req.Argv, Env: env, User: s.user(req.User),
		Workdir: sandbox.InSandboxPath(s.cfg.Workdir, req.Workdir), FileSizeMB: s.r.limits(s.cfg.Limits).FileSizeMB,
	}
	svc := &sandbox.ServiceState{}
	// The helper's first frame is its heartbeat or output only once the
	// command started; a user that does not resolve ends the call at once.
	started := make(chan error, 1)
	var once sync.Once
	s.svcs.Add(1)
	go func() {
		defer s.svcs.Done()
		hres, err := s.call(s.svcCtx, hreq, nil, func(kind byte, p []byte) {
			once.Do(func() { started <- nil })
			if kind != helper.FrameHeartbeat {
				svc.Write(p)
			}
		})
		switch {
		case err != nil:
			once.Do(func() { started <- err })
			svc.SetExited(137) // the pod went away under it
		case hres.Error != "":
			once.Do(func() { started <- errors.New(hres.Error) })
			svc.SetExited(126)
		default:
			once.Do(func() { started <- nil })
			svc.SetExited(hres.ExitCode)
		}
	}()
	select {
	case err := <-started:
		if err != nil {
			return nil, fmt.Errorf("starting a service in pod sandbox %s: %w", s.name, err)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return svc, nil
}

// call runs one helper call over the pod exec API: the request and body on
// stdin, frames from stdout to onFrame, then the result.
func (s *Sandbox) call(ctx context.Context, req helper.Request, body []byte, onFrame func(kind byte, p []byte)) (helper.Result, error) {
	var res helper.Result
	var in bytes.Buffer
	if err := helper.WriteRequest(&in, req); err != nil {
		return res, err
	}
	in.Write(body)
	u := s.r.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.r.o.Namespace).Name(s.name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: containerSandbox, Command: []string{helper.Path, "run"},
		Stdin: true, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(s.r.o.Config, "GET", u.String())
	if err != nil {
		return res, fmt.Errorf("making a websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(s.r.o.Config, "POST", u)
	if err != nil {
		return res, fmt.Errorf("making an SPDY executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return res, err
	}
	pr, pw := io.Pipe()
	stderr := sandbox.NewCappedBuffer(16 << 10)
	got := false
	parsed := make(chan error, 1)
	go func() {
		var buf []byte
		for {
			kind, p, err := helper.ReadFrame(pr, buf)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				pr.CloseWithError(io.ErrClosedPipe)
				parsed <- err
				return
			}
			buf = p[:0]
			if kind == helper.FrameResult {
				if jerr := json.Unmarshal(p, &res); jerr != nil {
					parsed <- fmt.Errorf("%w: result: %v", helper.ErrFrame, jerr)
					pr.CloseWithError(io.ErrClosedPipe)
					return
				}
				got = true
				continue
			}
			if onFrame != nil {
				onFrame(kind, p)
			}
		}
	}()
	serr := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: &in, Stdout: pw, Stderr: stderr})
	pw.Close()
	perr := <-parsed
	if got {
		return res, nil
	}
	var ce utilexec.CodeExitError
	switch {
	case ctx.Err() != nil:
		return res, ctx.Err()
	case errors.As(serr, &ce):
		return res, &helperDied{code: ce.Code}
	case serr != nil:
		return res, fmt.Errorf("pod exec of the helper: %w (helper stderr: %q)", serr, stderr.Bytes())
	case perr != nil:
		return res, perr
	}
	return res, fmt.Errorf("the pod's helper ended without a result (helper stderr: %q)", stderr.Bytes())
}

// helperDied is a helper that exited without a result, with its status.
type helperDied struct{ code int }

func (e *helperDied) Error() string {
	return fmt.Sprintf("the pod's exec helper exited with status %d without a result", e.code)
}

// Report describes the isolation that applies.
func (s *Sandbox) Report() sandbox.Report {
	lim := s.r.limits(s.cfg.Limits)
	rep := sandbox.Report{Rung: Name, Isolation: s.r.Isolation(), Network: s.cfg.Policy.Network, ProxyAddr: s.proxy}
	if lim.MemoryMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("memory %d MiB (pod limit = request)", lim.MemoryMB))
	}
	if lim.CPUs > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("cpus %g", lim.CPUs))
	}
	if lim.DiskMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("ephemeral-storage %d MiB (the kubelet evicts the pod past it)", lim.DiskMB))
	}
	if lim.FileSizeMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("rlimit FSIZE %d MiB", lim.FileSizeMB))
	}
	rep.Limits = append(rep.Limits, "no-new-privileges (allowPrivilegeEscalation: false)", "seccomp RuntimeDefault, and the other rungs' filter under it (installed by the pod's helper: no ptrace, mount, user namespaces, AF_VSOCK, …)")
	if s.cfg.ReadOnlyRoot {
		rep.Limits = append(rep.Limits, "read-only root")
	}
	rep.UIDMap = []string{"no user namespace: root in the pod is uid 0 of the node, held to the container's capability set (Docker's default), no-new-privileges, the runtime's seccomp profile and its own namespaces"}
	if u, _, _ := strings.Cut(s.cfg.User, ":"); u == "" || u == "0" || u == "root" {
		rep.Capabilities = append([]string(nil), sandbox.ContainerCapabilities...)
	} else {
		rep.Notes = append(rep.Notes, "a non-root user holds no capabilities (the container's set applies to root)")
	}
	rep.Notes = append(rep.Notes, s.notes...)
	if rc := s.r.o.RuntimeClassName; rc != "" {
		rep.Notes = append(rep.Notes, "runtimeClassName "+rc)
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("pod %s/%s from image %s; capabilities dropped to Docker's default set, no service-account token, no service links, no host namespaces", s.r.o.Namespace, s.name, s.cfg.Image),
		"a NetworkPolicy selects the pod (no ingress; egress "+map[bool]string{true: "none", false: "only to the egress proxy " + s.proxy}[s.proxy == ""]+"): it holds only where the cluster's network plugin enforces NetworkPolicy",
		"no DNS resolver (dnsPolicy None, nameserver 127.0.0.1)")
	if lim.PidsMax > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("pids_max %d is not applied: a pod's process count is bounded only by the kubelet's podPidsLimit", lim.PidsMax))
	}
	return rep
}

// Close deletes the pod (grace 0) and its NetworkPolicy and waits until
// they are gone or ctx ends. It is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.life.Close(func() error {
		if s.stop != nil {
			s.stop()
		}
		err := s.remove(ctx)
		s.svcs.Wait()
		return err
	})
}

// remove deletes the pod and the policy and waits until both are gone.
func (s *Sandbox) remove(ctx context.Context) error {
	return deleteSandbox(ctx, s.r, s.name)
}

func deleteSandbox(ctx context.Context, r *Rung, name string) error {
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	var errs []error
	if err := r.cs.CoreV1().Pods(r.o.Namespace).Delete(ctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting pod %s/%s: %w", r.o.Namespace, name, err))
	}
	// The policy goes after the pod so the pod is never unpoliced.
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for len(errs) == 0 {
		_, err := r.cs.CoreV1().Pods(r.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("waiting for pod %s/%s to go: %w", r.o.Namespace, name, err))
			break
		}
		select {
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for pod %s/%s to go: %w", r.o.Namespace, name, ctx.Err()))
		case <-t.C:
		}
	}
	if err := r.cs.NetworkingV1().NetworkPolicies(r.o.Namespace).Delete(context.WithoutCancel(ctx), name, opts); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting NetworkPolicy %s/%s: %w", r.o.Namespace, name, err))
	}
	return errors.Join(errs...)
}
