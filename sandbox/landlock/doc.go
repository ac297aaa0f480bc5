// Package landlock is the "landlock" sandbox rung (isolation level process).
//
// A sandbox is a tree of re-executions of the engine binary
// (sandbox/reexec; main and TestMain must call reexec.Init first), started
// through /proc/self/exe so that the sandbox's ids need not reach the
// binary's directory:
//
//  1. The holder ("landlock-init", holder.go), started at the sandbox's
//     first command, is what a container runtime keeps between commands.
//     It starts as root of a new user namespace (sandbox/userns: ids
//     0–65535 map to a subordinate range when the engine is root, or with
//     newuidmap and /etc/subuid; else only root maps, to the engine's uid —
//     the report says which), with its own mount, PID, network, IPC and
//     UTS namespaces. Its directories arrive as descriptors (mounts.go): as
//     root the engine hands it idmapped clones of the image root, the
//     layers, the host's system directories and the state directory, so
//     files stay stored unshifted yet are owned by the mapped ids inside.
//     It brings up loopback, forwards 127.0.0.1:3128 to the egress proxy
//     (allowlist, allow) and assembles the root once at StateDir/root: an
//     overlay of Config.Layers over Config.Root (or over an empty base dir
//     when there is no image, with the host's /usr /bin /sbin /lib* /etc
//     bound read-only on top) whose upper directory is StateDir/upper;
//     StateDir/work bound at Config.Workdir, StateDir/tmp at /tmp, a small
//     tmpfs /dev (null, zero, full, random, urandom, tty) and /proc,
//     read-only, with sandbox.MaskedPaths hidden. Then it pivots into that
//     root and detaches the host's mounts, sets the sandbox's hostname (12
//     hex digits, as Docker's container id prefix) and binds the sandbox's
//     /etc/hostname, /etc/hosts and /etc/resolv.conf (etcfiles.go) over
//     the root's. It then only starts launchers, on the engine's request
//     over a control socket no sandbox process holds.
//  2. Each launcher ("landlock-exec") runs in a PID and mount namespace of
//     its own below the holder. It mounts its PID namespace's /proc
//     (read-only, masked) over the holder's, resolves ExecRequest.User in
//     the sandbox's /etc/passwd and /etc/group as docker exec -u does
//     (users.go), and starts the restricter, which it moves into the
//     command's cgroup before the restricter does anything (sandbox/limits:
//     a delegated v2 directory, or as root the v1 pids/memory/cpu
//     controllers), through cgroup.procs descriptors the engine opened: the
//     kernel checks such a write against the opener. The launcher stays
//     out of the cgroup, so a command at its limits cannot starve it.
//  3. The restricter ("landlock-restrict") chroots into the root,
//     keeps sandbox.ContainerCapabilities (Docker's default set, within
//     the user namespace; none when Config.User is set or the user is not
//     root) and drops the rest from every set, sets no_new_privs, installs
//     a seccomp filter, applies Landlock, sets the user's ids and the
//     rlimits and execs the command in a new session with only the config
//     and request environment.
//
// A launcher is init of its command's PID namespace: when the command ends
// or times out it SIGKILLs everything else in it (kill -1) — orphans,
// double-forked and setsid'd daemons included — and reaps them; with a
// cgroup the engine then kills whatever is left in it and removes it. A
// service (StartService, service.go) is a launcher like a command's whose
// end the engine does not wait for: no command's sweep reaches its PID
// namespace, and a command cannot see it in its /proc. Close (and
// Snapshot) end the holder, init of the outer PID namespace, and with it
// everything in the sandbox; so does the engine's death, which closes the
// control socket.
//
// What is contained, and how:
//   - Identity: root inside is an unprivileged uid outside, so what the
//     kernel checks against the initial namespace (global sysctls such as
//     kernel.core_pattern, host files, module loading) is refused even
//     where a mount would allow it; the capabilities it holds apply to its
//     own namespaces only.
//   - Filesystem: Landlock (ABI ≥ 1, no best-effort downgrade) allows
//     read+execute on the root and read-write on the workdir, /tmp and /dev's
//     device files; without ReadOnlyRoot the whole root is read-write as far
//     as Landlock goes, and the mounts decide: the host's system directories
//     and /proc are read-only mounts, the rest is the private overlay. Host
//     paths outside the root are not in the mount namespace at all (so
//     CAP_SYS_CHROOT reaches nothing either). Landlock also denies mounts
//     and ptrace of processes outside the sandbox's domain (the launcher
//     and holder included) and, from ABI 6, signals to them and connecting
//     to their abstract UNIX sockets.
//   - Not contained: the host's /etc is readable without an image (as on
//     bwrap); pathname UNIX sockets are not restricted before Landlock ABI
//     9, but the private root holds none of the host's. With ReadOnlyRoot
//     the /etc files are read-only too (Docker's stay writable).
//   - Network: the sandbox's network namespace has only loopback, shared
//     by its commands and services (a service's port is reachable from a
//     later command, as in a container with network none). With allowlist
//     and allow (which needs the engine's allow-all egress proxy: the rung
//     never shares the host's network) the holder forwards 127.0.0.1:3128
//     to a relay socket (sandbox/bridge.Relay) in front of
//     Policy.ProxyAddr (unix:/path or host:port); HTTP(S)_PROXY point at it
//     and NO_PROXY is sandbox.NoProxy's.
//     With deny or allowlist the seccomp filter allows socket(2) only for
//     AF_UNIX, AF_NETLINK and plain TCP, which closes UDP (DNS included),
//     MPTCP, SCTP and raw sockets, and TCP connects beyond loopback are
//     refused and recorded. Landlock has no
//     TCP rules: they name ports, not addresses, so they could not allow
//     loopback alone; the namespace is the boundary. ptrace, mounts and
//     io_uring (whose socket operations bypass seccomp) are denied always.
//   - Visible: the filter's refusals (sockets, connects under deny and
//     allowlist, ptrace, mounts) reach the launcher as seccomp user
//     notifications, which it answers and returns as the command's
//     "network" and "syscall" denials (notify.go); the cgroup's pids.max
//     and OOM events give "pids" and "oom" denials.
//   - Limits: with a memory cgroup, MemoryMB is memory.limit_in_bytes /
//     memory.max and an OOM kill gives an "oom" denial from the cgroup's
//     counter; without one it is RLIMIT_AS (allocations fail, and "oom" is
//     inferred from the program's allocation error or a SIGSEGV/SIGABRT
//     death). PidsMax (default 512) and CPUs need the cgroup: without one
//     there is no process cap (RLIMIT_NPROC would count every process of the
//     uid on the host), only the command timeout and the final sweep.
//     FileSizeMB is RLIMIT_FSIZE ("fsize" denial on SIGXFSZ). DiskMB (engine
//     as root) puts the writable layer, workdir and /tmp on a tmpfs of that
//     size (sandbox/limits.Disk), with the /etc files: writes past it fail
//     with ENOSPC and the command gets a "disk" denial; such a sandbox
//     cannot be snapshotted.
//     A non-root engine does not enforce DiskMB (the report says so).
//
// File operations (files.go) resolve in the sandbox's root only and refuse
// special files; see there.
//
// Snapshot ends the holder (and any service), removes the mount points it
// created for the /etc files, moves the overlay's upper directory to
// StateDir/snapshots/N and copies the workdir into it at its path; that
// directory is the layer (it
// outlives Close; the caller owns StateDir — when StateDir is empty the rung
// uses a temporary directory, removed at Close unless it holds snapshots).
// Create copies the layers' (and the root's) workdir contents into the new
// workdir, since the bound workdir hides them. Layers hold overlay
// metadata in user.overlay.* xattrs (the overlay is mounted in a user
// namespace).
package landlock
