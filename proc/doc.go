// Package proc owns one operating-system process from spawn to exit: it starts
// a detached child in its own session, pins it with a pidfd, proves its
// identity through /proc before any signal, notices its exit through a single
// epoll loop, and stops its whole process group with SIGTERM, a grace period
// and SIGKILL.
//
// proc knows nothing of sandboxes, registries or HTTP. Its guarantees:
//
//   - A process is signalled only while it is pinned by a pidfd and its
//     identity (marker, start time, boot id) has been verified after the pidfd
//     was opened. A PID that now belongs to someone else is never signalled.
//   - A process spawned by this package is reaped by this package, and only
//     after its process group has been killed, so the group id cannot be
//     reused while it is signalled.
//   - A process adopted after a daemon restart is not our child: its exit is
//     seen through the pidfd, but its exit status is unknown (ExitStatus.Known
//     is false), and its leftover group members are found by scanning /proc
//     for the marker rather than by signalling a group id that may have been
//     reused; that sweep runs just after Done is closed.
package proc
