// Package cgroup contains each native sandbox in a cgroup of its own, under
// a subtree that belongs to the daemon, so that nothing a sandbox starts
// escapes it, its limits hold, and its usage can be read.
//
// What a machine offers is found once, by Detect:
//
//   - ModeV2: a pure cgroup v2 hierarchy with a writable (delegated)
//     subtree, as under a systemd user session. Containment and the cpu,
//     memory and pids limits all come from cgroup v2; the daemon moves
//     itself into a leaf of its own cgroup when that is what it takes to
//     enable controllers below it (the "no internal processes" rule).
//   - ModeHybrid: a writable cgroup2 hierarchy without controllers (often
//     at /sys/fs/cgroup/unified) beside cgroup v1 hierarchies. cgroup2
//     gives containment (cgroup.kill, cgroup.events); the v1 memory, pids
//     and cpu hierarchies give limits and usage.
//   - ModeUnavailable or ModeOff: no cgroup is used; sandboxes are fenced
//     by their session and process group only (package proc).
//
// A child is born in its cgroups: clone3 with CLONE_INTO_CGROUP puts it in
// its cgroup2 group, and on a hybrid machine the forking thread visits the
// sandbox's v1 groups for the instant of the fork, so the child inherits
// them (Group implements proc.Placement). No instant of a sandbox's life is
// spent outside its cgroups.
//
// A group ends with cgroup.kill (or, on kernels without it, freezing the
// group and killing each member after checking its membership through a
// pidfd); Empty reports, through inotify on cgroup.events, never by
// polling, the moment its last process is gone.
//
// It talks to the kernel through its files with golang.org/x/sys/unix
// rather than through containerd/cgroups or opencontainers/cgroups: those
// manage either v1 or v2 trees, while the hybrid layout needs both at once
// (v2 to contain, v1 to limit) and placement at clone time, and the files
// involved are a dozen.
package cgroup
