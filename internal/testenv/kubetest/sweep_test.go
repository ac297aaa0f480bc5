package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"evals.si/internal/testenv"
)

// A test binary killed outright (SIGKILL: no cleanup runs) leaves a running
// pod, its shim, mounts, cgroups and the bridge behind; the next start's
// sweep of its slot removes all of it.
func TestCrashedBinaryIsSwept(t *testing.T) {
	if os.Getenv("KUBETEST_CRASH_CHILD") == "1" {
		crashChild(t)
		return
	}
	if _, err := binDir(); err != nil {
		testenv.Missing(t, "Kubernetes "+Version, err.Error())
	}
	if reason := nodeMissing(); reason != "" {
		testenv.Missing(t, "a Kubernetes node", reason)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashedBinaryIsSwept$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "KUBETEST_CRASH_CHILD=1")
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child test binary should have killed itself after starting a pod; it ended with %v:\n%s", err, out)
	}
	n, pids := -1, map[int]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var pid int
		var cmdline string
		if _, err := fmt.Sscanf(sc.Text(), "SLOT %d", &n); err == nil {
			continue
		}
		if _, err := fmt.Sscanf(sc.Text(), "PID %d %q", &pid, &cmdline); err == nil {
			pids[pid] = cmdline
		}
	}
	if n < 0 || len(pids) == 0 {
		t.Fatalf("the child reported no slot or no processes:\n%s", out)
	}

	s, ok, err := lockSlot(n)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		defer s.lock.Close()
		alive := alivePIDs(pids)
		if len(alive) == 0 {
			t.Fatalf("nothing of the killed cluster survived to sweep (pids %v); the test proves nothing", pids)
		}
		for _, pid := range alive {
			t.Logf("survivor to sweep: %d %s", pid, pids[pid])
		}
		if !hasBridge(s.bridge()) {
			t.Fatalf("the killed cluster's bridge %s is gone before the sweep; the test proves nothing", s.bridge())
		}
		if err := sweep(s); err != nil {
			t.Fatalf("sweeping slot %d: %v", n, err)
		}
	} else {
		t.Logf("slot %d was taken by another test binary before us; its start swept it", n)
	}
	if alive := alivePIDs(pids); len(alive) > 0 {
		t.Errorf("processes of the killed cluster survived the sweep: %v", alive)
	}
	if !ok {
		return
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s survived the sweep (%v)", s.dir, err)
	}
	if hasBridge(s.bridge()) {
		t.Errorf("the bridge %s survived the sweep", s.bridge())
	}
	if hasCgroup(s.cgroupRoot()) {
		t.Errorf("the cgroup %s survived the sweep", s.cgroupRoot())
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(s.dir+"/")) {
		t.Errorf("mounts under %s survived the sweep", s.dir)
	}
}

// crashChild starts a cluster with a pod, reports its processes and kills
// itself.
func crashChild(t *testing.T) {
	c := Shared(t, Options{Node: true})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig)
	ns := c.Namespace(t)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, "survivor", metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pod did not run: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf("SLOT %d\n", c.slot.n)
	for _, pid := range slotProcesses(c.slot) {
		fmt.Printf("PID %d %q\n", pid, cmdlineOf(pid))
	}
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// alivePIDs lists the pids still running the same command line (a pid
// reused by another process does not count).
func alivePIDs(pids map[int]string) []int {
	var alive []int
	for pid, cmdline := range pids {
		if c := cmdlineOf(pid); c != "" && c == cmdline {
			alive = append(alive, pid)
		}
	}
	return alive
}
