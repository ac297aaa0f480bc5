package qemu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/sandbox/vm"
)

// engineEnv makes TestHelperEngine a stand-in engine: it boots a machine
// of the kernel, initramfs and directory named by the environment, prints
// QEMU's pid, and waits to be killed.
const engineEnv = "EVALSI_QEMU_TEST_ENGINE"

func TestHelperEngine(t *testing.T) {
	if os.Getenv(engineEnv) != "1" {
		t.Skip("the stand-in engine of TestQEMUDiesWithTheEngine")
	}
	m, err := New(Options{Accel: "tcg"}).Boot(context.Background(), vm.BootSpec{
		Kernel: os.Getenv("EVALSI_QEMU_TEST_KERNEL"), Initrd: os.Getenv("EVALSI_QEMU_TEST_INITRD"), Cmdline: "loglevel=4",
		Dir: os.Getenv("EVALSI_QEMU_TEST_DIR"),
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(m.(*machine).cmd.Process.Pid)
	select {}
}

// TestQEMUDiesWithTheEngine: a QEMU that changed user still gets the
// parent-death signal (the kernel clears it on a change of credentials,
// so it must be set after), and dies when the engine is SIGKILLed.
func TestQEMUDiesWithTheEngine(t *testing.T) {
	g := buildGuest(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	engine := exec.Command(exe, "-test.run=^TestHelperEngine$")
	engine.Env = append(os.Environ(), engineEnv+"=1", "EVALSI_QEMU_TEST_KERNEL="+g.kernel, "EVALSI_QEMU_TEST_INITRD="+g.initrd, "EVALSI_QEMU_TEST_DIR="+machineDir(t))
	out, err := engine.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Start(); err != nil {
		t.Fatal(err)
	}
	defer engine.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("the stand-in engine said %q (%v)", line, err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	if processGone(pid) {
		t.Fatalf("qemu (pid %d) is not running", pid)
	}
	uids, _, _ := runsAs(t, pid)
	uid, _ := strconv.Atoi(strings.Fields(uids + " x")[0])
	if root := os.Geteuid() == 0; (root && (uid < DefaultID || uid >= DefaultID+idCount)) || (!root && uid != os.Geteuid()) {
		t.Fatalf("qemu (pid %d) runs as uids %q; want a leased id from %d (or the engine's own when not root)", pid, uids, DefaultID)
	}
	engine.Process.Kill()
	engine.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("qemu (pid %d) still runs 5s after the engine was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processGone says whether pid has ended: no such process, or a zombie
// nobody reaps.
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}
