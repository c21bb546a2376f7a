// Package cgroup will own the daemon's cgroup v2 subtree: one child cgroup
// per sandbox, children spawned straight into it (clone3 with
// CLONE_INTO_CGROUP, as proc.Spec will allow), and cgroup.kill to end a
// sandbox whose processes escaped their process group.
//
// Nothing is implemented yet: sandboxes are contained by their session and
// process group only (see proc). Containment comes with its own issue.
package cgroup
