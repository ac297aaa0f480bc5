// Package limits turns sandbox.Limits into what the kernel enforces: rlimits
// applied to the process that launches a command, a per-command cgroup (v2
// in a delegated directory, or v1 controllers when running as root on a
// hybrid host), and a seccomp filter for the bubblewrap rung.
//
// It only writes files and calls setrlimit; starting processes is the rung's
// job.
package limits
