package main

import (
	"fmt"
	"io"
)

func goal(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func (r *results) markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Machine: %d CPUs (%s), Linux %s, %s.\n\n", r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go)
	p("| measurement | n | median | p99 | max | goal | |\n|---|---:|---:|---:|---:|---|---|\n")
	row := func(name string, s stat, goalText string, ok *bool) {
		verdict := ""
		if ok != nil {
			verdict = goal(*ok)
		}
		p("| %s | %d | %.2f ms | %.2f ms | %.2f ms | %s | %s |\n", name, s.N, s.Median, s.P99, s.Max, goalText, verdict)
	}
	ready := r.Ready
	childOK := ready.ChildAnswers.Median-ready.Floor.Median <= 1
	startedOK := ready.Started.Median-ready.Floor.Median <= 5
	row("floor: stub spawned directly → answers", ready.Floor, "", nil)
	row("`POST /v1/sandboxes` answered (201, child spawned)", ready.Answered, "", nil)
	row("create → child answers", ready.ChildAnswers, "≤ floor + 1 ms (median)", &childOK)
	row("create → `sandbox.started`", ready.Started, "≤ floor + 5 ms (median)", &startedOK)
	row("create → child answers, cgroups off", ready.ChildAnswersNoCgroups, "", nil)
	for _, c := range []struct {
		name string
		s    stat
	}{{"kill -9 → `sandbox.stopped` (plain child)", r.Crash.Plain}, {"kill -9 → `sandbox.stopped` (grandchild holds stdout)", r.Crash.Grandchild}, {"kill -9 → `sandbox.stopped` (re-adopted after restart)", r.Crash.Readopted}} {
		ok := c.s.P99 < 10
		row(c.name, c.s, "p99 < 10 ms", &ok)
	}
	listOK := r.Scale.List.P99 < 10
	row(fmt.Sprintf("`GET /v1/sandboxes` with %d sandboxes", r.Scale.N), r.Scale.List, "p99 < 10 ms", &listOK)
	evOK := r.Events.Delivery.P99 < 5
	row(fmt.Sprintf("kill -9 → event at each of %d subscribers, creates running", r.Events.Subscribers), r.Events.Delivery, "p99 < 5 ms", &evOK)
	row(fmt.Sprintf("kill -9 → event at each of %d subscribers, no other load", r.Events.Subscribers), r.Events.Quiet, "", nil)
	p("\nReadiness against the floor (medians): child answers %+.2f ms (×%.2f), `started` %+.2f ms (×%.2f).\n\n",
		ready.ChildAnswers.Median-ready.Floor.Median, ratio(ready.ChildAnswers.Median, ready.Floor.Median),
		ready.Started.Median-ready.Floor.Median, ratio(ready.Started.Median, ready.Floor.Median))
	p("Containment (cgroups %s) costs %+.2f ms per create → child answers (medians, against cgroups off).\n\n",
		ready.Cgroups, ready.ChildAnswers.Median-ready.ChildAnswersNoCgroups.Median)
	if r.Docker.Skipped != "" {
		p("Docker: skipped (%s).\n\n", r.Docker.Skipped)
	} else if r.Docker.Floor.N > 0 {
		dockerOK := r.Docker.ChildAnswers.Median-r.Docker.Floor.Median <= 20
		p("| docker | n | median | p99 | max | goal | |\n|---|---:|---:|---:|---:|---|---|\n")
		row("floor: the image started through the engine API → answers", r.Docker.Floor, "", nil)
		row("docker create → container answers", r.Docker.ChildAnswers, "≤ floor + 20 ms (median)", &dockerOK)
		p("\n")
	}
	bulkOK := r.Bulk.AllAnsweredMs <= 1.2*r.Bulk.FloorMs
	p("| bulk start | floor (spawned directly) | through creates | ratio | goal | |\n|---|---:|---:|---:|---|---|\n")
	p("| %d stubs at once → every one answers | %.0f ms | %.0f ms | ×%.2f | ≤ ×1.2 | %s |\n\n",
		r.Bulk.N, r.Bulk.FloorMs, r.Bulk.AllAnsweredMs, ratio(r.Bulk.AllAnsweredMs, r.Bulk.FloorMs), goal(bulkOK))
	rssOK := r.Scale.RSSAtNMiB < 40
	adoptOK := r.Rehydrate.AllAdoptedMs < 1000
	p("| scale and restart | value | goal | |\n|---|---:|---|---|\n")
	p("| %d sandboxes created concurrently → all `started` | %.0f ms | | |\n", r.Scale.N, r.Scale.AllStartedMs)
	p("| port collisions | %d | 0 | %s |\n", r.Scale.PortCollisions, goal(r.Scale.PortCollisions == 0))
	p("| daemon RSS idle → at %d | %.1f → %.1f MiB | < 40 MiB | %s |\n", r.Scale.N, r.Scale.RSSIdleMiB, r.Scale.RSSAtNMiB, goal(rssOK))
	p("| daemon memory per sandbox | %.1f KiB | | |\n", r.Scale.PerSandboxKiB)
	p("| daemon goroutines / OS threads at %d | %d / %d | | |\n", r.Scale.N, r.Scale.Goroutines, r.Scale.DaemonThreadsAt)
	p("| SIGKILL with %d live children → restart → `/v1/info` answers | %.0f ms | | |\n", r.Rehydrate.N, r.Rehydrate.InfoMs)
	p("| … → all %d verified and re-adopted (metrics: %d adopted) | %.0f ms | < 1 s | %s |\n", r.Rehydrate.N, r.Rehydrate.AdoptedMetric, r.Rehydrate.AllAdoptedMs, goal(adoptOK))
	p("| events missed by subscribers | %d | 0 | %s |\n", r.Events.Missed, goal(r.Events.Missed == 0))
	if t := r.Toolbox; t.Exec.N > 0 {
		p("\n| toolbox | floor | through the daemon | ratio |\n|---|---:|---:|---:|\n")
		p("| exec of `true`, round trip (median; floor: fork/exec here) | %.2f ms | %.2f ms | ×%.2f |\n", t.ExecFloor.Median, t.Exec.Median, ratio(t.Exec.Median, t.ExecFloor.Median))
		p("| upload of %d MiB (floor: a synced file copy) | %.0f MiB/s | %.0f MiB/s | ×%.2f |\n", t.SizeMiB, t.CopyMiBps, t.UploadMiBps, ratio(t.UploadMiBps, t.CopyMiBps))
		p("| download of %d MiB (floor: the file read here) | %.0f MiB/s | %.0f MiB/s | ×%.2f |\n", t.SizeMiB, t.ReadMiBps, t.DownloadMiBps, ratio(t.DownloadMiBps, t.ReadMiBps))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
