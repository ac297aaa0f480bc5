package vmproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a stand-in engine: it starts a sleep
// with Start, prints its pid, and waits to be killed.
const helperEnv = "EVALSI_VMPROC_TEST_ENGINE"

func TestMain(m *testing.M) {
	// The main thread never ends, even when a goroutine locked to it
	// exits: keeping the main goroutine on it keeps the tests' goroutines
	// on threads that do, as an engine's are.
	runtime.LockOSThread()
	if os.Getenv(helperEnv) == "1" {
		cmd := exec.Command("sleep", "300")
		if _, err := Start(cmd); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	}
	os.Exit(m.Run())
}

// gone says whether pid has ended: no such process, or a zombie nobody
// reaps (a container's init may not).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state …: the state follows the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// A machine started by Start outlives the goroutine (and the thread) that
// asked for it; a process started by a plain cmd.Start with Pdeathsig from
// a goroutine locked to its thread does not, which is why Start exists.
func TestStartOutlivesItsCaller(t *testing.T) {
	cases := []struct {
		name      string
		start     func(*exec.Cmd) (<-chan error, error)
		wantAlive bool
	}{
		{"Start", Start, true},
		{"plain Pdeathsig", func(cmd *exec.Cmd) (<-chan error, error) {
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			ch := make(chan error, 1)
			go func() { ch <- cmd.Wait() }()
			return ch, nil
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "300")
			type started struct {
				waited <-chan error
				err    error
			}
			res := make(chan started, 1)
			go func() {
				// Locked and never unlocked: the thread ends with this
				// goroutine, as a goroutine that entered a namespace does.
				runtime.LockOSThread()
				w, err := c.start(cmd)
				res <- started{w, err}
			}()
			s := <-res
			if s.err != nil {
				t.Fatal(s.err)
			}
			defer cmd.Process.Kill()
			select {
			case err := <-s.waited:
				if c.wantAlive {
					t.Fatalf("the process ended with its caller's thread: %v", err)
				}
				t.Logf("the control case's process ended: %v", err)
			case <-time.After(time.Second):
				if !c.wantAlive {
					t.Fatal("the control case's process outlived its thread: the test cannot tell Start from it")
				}
			}
			if c.wantAlive {
				cmd.Process.Kill()
				if err := <-s.waited; err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("after Kill the wait says %v", err)
				}
			}
		})
	}
}

// A process started by Start dies with the engine, even when the engine
// is SIGKILLed and cleans nothing up.
func TestStartDiesWithTheEngine(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	engine := exec.Command(exe, "-test.run=^$")
	engine.Env = append(os.Environ(), helperEnv+"=1")
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
	if gone(pid) {
		t.Fatalf("the machine (pid %d) is not running", pid)
	}
	engine.Process.Kill()
	engine.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the machine (pid %d) still runs 5s after the engine was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartError(t *testing.T) {
	_, err := Start(exec.Command("/nonexistent/vmm"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start of a missing binary = %v", err)
	}
}
