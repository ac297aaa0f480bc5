package host

import (
	"os"
	"testing"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func newRung(t *testing.T) sandbox.Rung { return New() }

// options declares what the host rung does not do; which limits hold
// depends on whether a cgroup is available to it here.
func options(t *testing.T) sandboxtest.Options {
	cg, note, err := limits.Detect("auto", limits.ThisHost())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host rung cgroups: %s", note)
	none := "the host rung has no isolation"
	o := sandboxtest.Options{
		Gaps: map[string]string{
			sandboxtest.CapNetworkDeny:  none,
			sandboxtest.CapReadOnlyRoot: none,
			sandboxtest.CapPrivateRoot:  none,
			sandboxtest.CapWorkdirPath:  "the workdir is a host temp directory",
			sandboxtest.CapExecUser:     "the host rung has no users: commands run as the engine's own user (TestUser)",
			sandboxtest.CapEtcFiles:     "commands see the host's own /etc",
		},
		Uncontained: map[string]string{
			sandboxtest.RowReadHostFile:   none,
			sandboxtest.RowWriteHostFile:  none,
			sandboxtest.RowNetTCP:         none,
			sandboxtest.RowNetUDP:         none,
			sandboxtest.RowNetDNS:         none,
			sandboxtest.RowSeeHostProcess: none,
			sandboxtest.RowKillHostProc:   none,
			sandboxtest.RowPtrace:         "no seccomp filter",
			sandboxtest.RowVsock:          "no seccomp filter: the host's vsock (its hypervisor, when the host is a VM) is reachable",
			sandboxtest.RowEngineEnv:      "the engine's /proc/PID/environ is readable by the same user",
		},
		NotRun: map[string]string{
			sandboxtest.RowMount:           "mounts would change the host's mount table when the engine runs as root",
			sandboxtest.RowAllowlistBypass: "the host rung refuses network: allowlist (it cannot enforce one)",
			sandboxtest.RowUserToRoot:      "the host rung cannot run a command as another user",
		},
	}
	if !cg.HasMemory() {
		o.Gaps[sandboxtest.CapMemoryDenial] = "no memory cgroup: memory is bounded by RLIMIT_AS, allocations just fail"
	}
	if cg == nil {
		o.Uncontained[sandboxtest.RowDaemon] = "without a cgroup, a setsid daemon escapes the process-group kill"
		if os.Geteuid() == 0 {
			o.NotRun[sandboxtest.RowForkBomb] = "no pids cgroup, and RLIMIT_NPROC does not bind root: a fork bomb would hit the host"
		}
	}
	return o
}

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, options(t)) }

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, options(t)) }
