// Command evalsi-pod-helper runs inside a pod rung sandbox (see
// evals.si/sandbox/pod/internal/helper). Build it static (CGO_ENABLED=0):
// the sandbox's image may have no libc.
//
//	evalsi-pod-helper install DIR   copy itself into DIR (the init container)
//	evalsi-pod-helper init WORKDIR  the sandbox container's pid 1
//	evalsi-pod-helper run           serve one call on stdin/stdout
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"evals.si/sandbox/limits"
	"evals.si/sandbox/pod/internal/helper"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi-pod-helper:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: evalsi-pod-helper install DIR | init WORKDIR | run")
	}
	switch args[0] {
	case "install":
		if len(args) != 2 {
			return fmt.Errorf("usage: install DIR")
		}
		return install(args[1])
	case "init":
		wd := ""
		if len(args) > 1 {
			wd = args[1]
		}
		if err := limits.InstallSeccompFilter(); err != nil {
			return err
		}
		return helper.Init(wd)
	case "run":
		// The runtime's RuntimeDefault profile is Docker's, which lets
		// the sandbox ptrace its own processes and open AF_VSOCK sockets
		// (a node that is itself a VM has a hypervisor there): the
		// commands also get the filter the other rungs use.
		if err := limits.InstallSeccompFilter(); err != nil {
			return err
		}
		return helper.Run(os.Stdin, os.Stdout)
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

func install(dir string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	dst := filepath.Join(dir, filepath.Base(helper.Path))
	f, err := os.OpenFile(dst+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, self); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}
