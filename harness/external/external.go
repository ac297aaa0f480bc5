// Package external is the worker's side of harness.external: an agent.Agent
// that runs each trial through another harness over the harness protocol
// (evals.si/harness/harnesspb).
//
// The harness is reached in one of three forms:
//   - address: a gRPC target the harness already serves ("127.0.0.1:7000",
//     "unix:///run/h.sock"); the worker neither starts nor stops it.
//   - command: a program the worker starts (in the spec's directory, with
//     $EVALSI_HARNESS_SOCKET naming the unix socket to serve on) when the run
//     starts and stops (SIGTERM to its process group, then SIGKILL) when the
//     run ends.
//   - python: "module:Class", hosted by the evalsi_harness shim (embedded
//     in this binary) under /usr/bin/python3, with the shim and the spec's
//     directory on the Python path; started and stopped like a command.
//
// The engine prepares the environment, sandbox and checker as for any agent
// run; this package gives the harness the trial's sandbox and the run's
// model only through the Worker callback service it serves per trial on a
// private unix socket. The harness never runs the model's commands on its
// own host and never sees provider credentials.
//
// What the harness streams is validated before it joins the trajectory (see
// validate). Usage, cost and steps in the result come from the worker's own
// metering of Worker.Chat, not from the harness's claims. A broken stream, a
// harness error or a failed Teardown is an infrastructure error of the
// trial, never a score.
package external

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"evals.si/agent"
	"evals.si/harness/harnesspb"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Pricer prices a model's usage; model.Pricing implements it.
type Pricer interface {
	Cost(model string, u trajectory.Usage) (usd float64, ok bool)
}

// Options configure an external harness.
type Options struct {
	// External is the spec's harness.external: exactly one form is set.
	External spec.External
	// Dir is the spec file's directory: the command runs there, and it is
	// on the Python path of the python form.
	Dir string
	// Connector and Model serve Worker.Chat: the run's target model.
	Connector model.Connector
	Model     string
	// Oracle runs the harness for the oracle agent (target.agent: {oracle:
	// {}}): each Task says so, the harness answers with the task's
	// reference solution, Connector may be nil and Worker.Chat fails.
	Oracle bool
	// Pricing prices Worker.Chat calls; nil counts no cost.
	Pricing Pricer
	Logger  *slog.Logger
	// Python is the interpreter of the python form. Unset: a product
	// adapter's own environment for its evalsi_<adapter> classes (see
	// interpreter), else /usr/bin/python3 when it exists, else python3 from
	// PATH.
	Python string
	// Executable reports this program's path, where an adapter environment
	// is looked for beside (default os.Executable).
	Executable func() (string, error)
	// Getenv reads the worker's environment, of which only the allowlisted
	// names (see passEnv) reach a started harness (default os.Getenv).
	Getenv func(string) string
	// StartTimeout bounds how long a started harness may take to answer
	// Describe (default 5 minutes: a `go run` compiles first); an address
	// gets DescribeTimeout (default 1 minute).
	StartTimeout, DescribeTimeout time.Duration
	// TeardownTimeout bounds Teardown, which runs even when the trial's
	// context is done (default 2 minutes). Setup, Run and Check are bounded
	// by the trial's context.
	TeardownTimeout time.Duration
}

// Agent runs trials through an external harness. It is safe for concurrent
// Runs. Close stops a harness the Agent started.
type Agent struct {
	o      Options
	log    *slog.Logger
	conn   *grpc.ClientConn
	client harnesspb.HarnessClient
	proc   *process // nil for the address form
	info   *harnesspb.DescribeResponse
	form   string
	seq    atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

var _ agent.Agent = (*Agent)(nil)

// New connects to the harness (starting it for the command and python
// forms) and asks it to Describe itself. The caller must Close the Agent.
func New(ctx context.Context, o Options) (*Agent, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 5 * time.Minute
	}
	if o.DescribeTimeout <= 0 {
		o.DescribeTimeout = time.Minute
	}
	if o.TeardownTimeout <= 0 {
		o.TeardownTimeout = 2 * time.Minute
	}
	if o.Connector == nil && !o.Oracle {
		return nil, errors.New("external harness: no model connector for Worker.Chat")
	}
	x := o.External
	n := 0
	for _, set := range []bool{x.Address != "", len(x.Command) > 0, x.Python != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("harness.external: set exactly one of address, command or python")
	}
	a := &Agent{o: o, log: o.Logger.With("harness", "external")}
	target := x.Address
	switch {
	case x.Address != "":
		a.form = "address"
	case len(x.Command) > 0:
		a.form = "command"
		p, err := startCommand(o)
		if err != nil {
			return nil, err
		}
		a.proc, target = p, "unix://"+p.socket
	default:
		a.form = "python"
		p, err := startPython(o)
		if err != nil {
			return nil, err
		}
		a.proc, target = p, "unix://"+p.socket
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A started harness needs a moment before it serves: retry fast.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("harness.external.address %q: %w", target, err)
	}
	a.conn, a.client = conn, harnesspb.NewHarnessClient(conn)
	if err := a.describe(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *Agent) describe(ctx context.Context) error {
	timeout := a.o.DescribeTimeout
	if a.proc != nil {
		timeout = a.o.StartTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if a.proc != nil {
		// Stop waiting as soon as the started harness exits.
		go func() {
			select {
			case <-a.proc.exited:
				cancel()
			case <-dctx.Done():
			}
		}()
	}
	// WaitForReady: a started harness may not be listening yet.
	resp, err := a.client.Describe(dctx, &harnesspb.DescribeRequest{ProtocolVersion: harnesspb.ProtocolVersion}, grpc.WaitForReady(true))
	if err != nil {
		if a.proc != nil {
			select {
			case <-a.proc.exited:
				return fmt.Errorf("external harness (%s form) exited before serving: %v; its output ends with:\n%s", a.form, a.proc.exitErr(), a.proc.tail())
			default:
			}
		}
		return fmt.Errorf("external harness (%s form): describe: %w", a.form, err)
	}
	major, _, _ := strings.Cut(resp.GetProtocolVersion(), ".")
	if major != harnesspb.ProtocolVersion {
		return fmt.Errorf("external harness %q speaks harness protocol %q; this worker speaks %q", resp.GetName(), resp.GetProtocolVersion(), harnesspb.ProtocolVersion)
	}
	a.info = resp
	a.log.Info("external harness ready", "form", a.form, "name", resp.GetName(), "version", resp.GetVersion(), "capabilities", resp.GetCapabilities())
	return nil
}

// Info is what the harness answered to Describe.
func (a *Agent) Info() (name, version, protocol string, capabilities []string) {
	return a.info.GetName(), a.info.GetVersion(), a.info.GetProtocolVersion(), a.info.GetCapabilities()
}

// Close disconnects, and stops the harness when the Agent started it. It is
// idempotent.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		if a.conn != nil {
			a.closeErr = a.conn.Close()
		}
		a.closeErr = errors.Join(a.closeErr, a.stop())
	})
	return a.closeErr
}

func (a *Agent) stop() error {
	if a.proc == nil {
		return nil
	}
	return a.proc.stop()
}

// NeedsSandbox reports whether the harness works in the trial's sandbox:
// true unless it advertised the no-sandbox capability, in which case the
// engine creates none and the Worker's sandbox calls fail.
func (a *Agent) NeedsSandbox() bool { return !a.hasCapability(harnesspb.CapabilityNoSandbox) }

func (a *Agent) hasCapability(c string) bool {
	for _, have := range a.info.GetCapabilities() {
		if have == c {
			return true
		}
	}
	return false
}
