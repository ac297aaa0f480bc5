// Package landlock is the "landlock" sandbox rung (isolation level process).
//
// Each Exec re-executes the engine binary twice (sandbox/reexec; main and
// TestMain must call reexec.Init first):
//
//  1. The launcher ("landlock-exec") starts in a private mount namespace
//     (directly as root, otherwise inside an unprivileged user namespace
//     mapping the caller to root). It joins the command's cgroup when one is
//     usable (sandbox/limits: a delegated v2 directory, or as root the v1
//     pids/memory/cpu controllers), makes itself a child subreaper and
//     assembles the root at StateDir/root: an overlay of Config.Layers over
//     Config.Root (or over an empty base dir when there is no image, with
//     the host's /usr /bin /sbin /lib* /etc bound read-only on top) whose
//     upper directory is StateDir/upper; StateDir/work bound at
//     Config.Workdir, StateDir/tmp at /tmp, a small tmpfs /dev (null, zero,
//     full, random, urandom, tty) and a read-only /proc.
//  2. The restricter ("landlock-restrict") chroots into that root, drops
//     every capability (bounding, ambient, permitted, effective,
//     inheritable), sets no_new_privs, installs a seccomp filter, applies
//     Landlock, sets the rlimits and execs the command in a new session
//     with only the config and request environment.
//
// When the command ends or times out the launcher SIGKILLs every process
// still below it — orphans, double-forked and setsid'd daemons included,
// since a subreaper inherits them — and reaps them; with a cgroup the
// engine then kills whatever is left in it and removes it.
//
// What is contained, and how:
//   - Filesystem: Landlock (ABI ≥ 1, no best-effort downgrade) allows
//     read+execute on the root and read-write on the workdir, /tmp and /dev's
//     device files; without ReadOnlyRoot the whole root is read-write as far
//     as Landlock goes, and the mounts decide: the host's system directories
//     and /proc are read-only mounts, the rest is the private overlay. Host
//     paths outside the root do not exist in the chroot. Landlock also denies
//     mounts and ptrace of processes outside the sandbox's domain (so
//     /proc/<pid>/environ of host processes is unreadable) and, from ABI 6,
//     signals to them and connecting to their abstract UNIX sockets.
//   - Not contained: there is no PID namespace, so host processes are
//     listed in /proc (cmdline readable); the host's /etc is readable (as on
//     bwrap); pathname UNIX sockets are not restricted before Landlock ABI 9,
//     but the private root holds none of the host's.
//   - Capabilities: the command is uid 0 of its namespace with no
//     capabilities, so raw sockets, module loading, mknod, reboot and the
//     like are refused; DAC still treats it as root for files Landlock lets
//     it open.
//   - Network: with deny or allowlist, Landlock (ABI ≥ 4) denies TCP bind
//     and connect, except connect to the egress proxy's port for allowlist
//     (HTTP(S)_PROXY point at it; the proxy must be TCP on loopback). The
//     seccomp filter allows socket(2) only for AF_UNIX, AF_NETLINK and plain
//     TCP, which closes UDP (DNS included; Landlock covers UDP only from ABI
//     10), MPTCP (never covered by Landlock's TCP rules), SCTP and raw
//     sockets. ptrace and io_uring (whose socket operations bypass seccomp)
//     are denied always. The host's network namespace is shared: with
//     network allow the command reaches whatever the host reaches.
//   - Limits: with a memory cgroup, MemoryMB is memory.limit_in_bytes /
//     memory.max and an OOM kill gives an "oom" denial from the cgroup's
//     counter; without one it is RLIMIT_AS (allocations fail, and "oom" is
//     inferred from the program's allocation error or a SIGSEGV/SIGABRT
//     death). PidsMax (default 512) and CPUs need the cgroup: without one
//     there is no process cap (RLIMIT_NPROC would count every process of the
//     uid on the host), only the command timeout and the final sweep.
//     FileSizeMB is RLIMIT_FSIZE ("fsize" denial on SIGXFSZ).
//
// Snapshot moves the overlay's upper directory to StateDir/snapshots/N and
// copies the workdir into it at its path; that directory is the layer (it
// outlives Close; the caller owns StateDir — when StateDir is empty the rung
// uses a temporary directory, removed at Close unless it holds snapshots).
// Create copies the layers' (and the root's) workdir contents into the new
// workdir, since the bound workdir hides them.
package landlock
