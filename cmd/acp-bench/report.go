package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

func goal(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// markdown is long because it writes the report's tables in the order
// BENCHMARKS.md shows them.
func (r *results) markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Machine: %d CPUs (%s), Linux %s, %s. Medians over interleaved rounds (%d; bulk: %d stubs).\n\n", r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go, r.Rounds, r.Bulk)
	on, off := &r.On, &r.Off
	p("| measurement | floor | %s | against floor | %s | against floor | goal | %s | %s |\n|---|---:|---:|---:|---:|---:|---|---|---|\n", on.Label, off.Label, on.Label, off.Label)
	// row prints one figure of both arms; f picks it, vs says it against
	// the floor, ok judges it.
	type pick func(a *arm) float64
	row := func(name string, floor string, f pick, unit string, vs func(float64) string, goalText string, ok func(float64) bool) {
		verdict := func(a *arm) string {
			if ok == nil {
				return ""
			}
			return goal(ok(f(a)))
		}
		val := func(v float64) string {
			switch unit {
			case "":
				return fmt.Sprintf("%.0f", v)
			case "ms":
				if v >= 100 {
					return fmt.Sprintf("%.0f ms", v)
				}
			}
			return fmt.Sprintf("%.2f %s", v, unit)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, floor, val(f(on)), vs(f(on)), val(f(off)), vs(f(off)), goalText, verdict(on), verdict(off))
	}
	none := func(float64) string { return "" }
	plus := func(floor float64) func(float64) string {
		return func(v float64) string { return fmt.Sprintf("%+.2f ms", v-floor) }
	}
	times := func(floor float64) func(float64) string {
		return func(v float64) string { return fmt.Sprintf("×%.2f", ratio(v, floor)) }
	}
	fl := r.Floor
	// Only what ran (--only) is reported: a figure not measured is no figure.
	ran := func(step string) bool { return slices.Contains(r.Ran, step) }
	readyFloor := fmt.Sprintf("%.2f ms (direct spawn)", fl.Ready.Median)
	if ran("readiness") {
		row("create → child answers", readyFloor, func(a *arm) float64 { return a.ChildAnswers.Median }, "ms", plus(fl.Ready.Median),
			"≤ floor + 1 ms", func(v float64) bool { return v-fl.Ready.Median <= 1 })
		row("`POST /v1/sandboxes` answered (201)", "", func(a *arm) float64 { return a.Answered.Median }, "ms", none, "", nil)
		row("… of which after the spawn (the answer less the steps to the spawn's end)", "", func(a *arm) float64 { return a.SpawnToAnswer.Median }, "ms", none,
			"≤ 2 ms", func(v float64) bool { return v <= 2 })
		row("daemon CPU from the create until the child answers", "", func(a *arm) float64 { return a.DaemonCPU.Median }, "ms", none, "", nil)
		// The child's own counts say where the difference goes: the
		// stub's threads outnumber two CPUs as it starts, so whatever the
		// daemon runs beside it, the child waits for.
		row("the child's CPU time until it answers (all its threads)", fmt.Sprintf("%.2f ms", fl.ReadyChild.Ran.Median),
			func(a *arm) float64 { return a.Child.Ran.Median }, "ms", plus(fl.ReadyChild.Ran.Median), "", nil)
		row("… its time waiting for a CPU (runnable, in a run queue)", fmt.Sprintf("%.2f ms", fl.ReadyChild.Waited.Median),
			func(a *arm) float64 { return a.Child.Waited.Median }, "ms", plus(fl.ReadyChild.Waited.Median), "", nil)
		row("create → `sandbox.started`", readyFloor, func(a *arm) float64 { return a.Started.Median }, "ms", plus(fl.Ready.Median), "", nil)
	}
	if ran("crash") {
		crashFloor := func(s stat, of string) string {
			return fmt.Sprintf("%.2f ms, p99 %.2f (pidfd wait%s)", s.Median, s.P99, of)
		}
		for _, c := range []struct {
			name  string
			f     func(a *arm) stat
			floor stat
			of    string // what the floor's stubs are, when not fresh
		}{
			{"plain child", func(a *arm) stat { return a.Crash.Plain }, fl.Crash, ""},
			{"grandchild holds stdout", func(a *arm) stat { return a.Crash.Grandchild }, fl.Crash, ""},
			{"re-adopted after a SIGKILL of the daemon", func(a *arm) stat { return a.Crash.Readopted }, fl.CrashAdopted, ", of stubs as old and idle"},
		} {
			row("kill -9 → `sandbox.stopped`, "+c.name+": median", crashFloor(c.floor, c.of), func(a *arm) float64 { return c.f(a).Median }, "ms", plus(c.floor.Median),
				"≤ floor + 1 ms", func(v float64) bool { return v-c.floor.Median <= 1 })
			row("… p99", "", func(a *arm) float64 { return c.f(a).P99 }, "ms", none, "≤ 5 ms", func(v float64) bool { return v <= 5 })
		}
	}
	if ran("bulk") {
		row(fmt.Sprintf("%d creates at once → every child answers", r.Bulk), fmt.Sprintf("%.0f ms (%d spawns from one Go program)", fl.BulkMs, r.Bulk),
			func(a *arm) float64 { return a.BulkMs }, "ms", times(fl.BulkMs), "≤ ×1.3", func(v float64) bool { return ratio(v, fl.BulkMs) <= 1.3 })
		row(fmt.Sprintf("%d stops at once → every one answered", r.Bulk), fmt.Sprintf("%.0f ms (SIGTERM, reaped)", fl.StopMs),
			func(a *arm) float64 { return a.StopMs }, "ms", times(fl.StopMs), "≤ 500 ms", func(v float64) bool { return v <= 500 })
	}
	if ran("scale") {
		row("daemon RSS, idle", "", func(a *arm) float64 { return a.Scale.RSSIdleMiB }, "MiB", none, "", nil)
		row("daemon RSS at 500 sandboxes", "", func(a *arm) float64 { return a.Scale.RSSAt500MiB }, "MiB", none, "≤ 30 MiB", func(v float64) bool { return v <= 30 })
		row(fmt.Sprintf("… %v after that burst", settle), "", func(a *arm) float64 { return a.Scale.RSSAt500SettledMiB }, "MiB", none, "", nil)
		row(fmt.Sprintf("daemon RSS at %d sandboxes", on.Scale.N), "", func(a *arm) float64 { return a.Scale.RSSAtNMiB }, "MiB", none, "≤ 40 MiB", func(v float64) bool { return v <= 40 })
		row("daemon memory per sandbox", "", func(a *arm) float64 { return a.Scale.PerSandboxKiB }, "KiB", none, "", nil)
		row(fmt.Sprintf("… of which Go heap in use at %d", on.Scale.N), "", func(a *arm) float64 { return a.Scale.HeapInuseMiB }, "MiB", none, "", nil)
		row(fmt.Sprintf("… of which goroutine stacks at %d", on.Scale.N), "", func(a *arm) float64 { return a.Scale.StackInuseMiB }, "MiB", none, "", nil)
		row(fmt.Sprintf("daemon goroutines at %d", on.Scale.N), "", func(a *arm) float64 { return float64(a.Scale.Goroutines) }, "", none, "", nil)
		row(fmt.Sprintf("daemon OS threads at %d", on.Scale.N), "", func(a *arm) float64 { return float64(a.Scale.DaemonThreadsAt) }, "", none, "", nil)
		row(fmt.Sprintf("%d created 64 at a time → all `started`", on.Scale.N), "", func(a *arm) float64 { return a.Scale.AllStartedMs }, "ms", none, "", nil)
		row(fmt.Sprintf("`GET /v1/sandboxes` with %d sandboxes, p99", on.Scale.N), "", func(a *arm) float64 { return a.Scale.List.P99 }, "ms", none, "< 10 ms", func(v float64) bool { return v < 10 })
		row("port collisions", "", func(a *arm) float64 { return float64(a.Scale.PortCollisions) }, "", none, "0", func(v float64) bool { return v == 0 })
	}
	if ran("rehydration") {
		row(fmt.Sprintf("SIGKILL with %d live children → restart → `/v1/info` answers", on.Rehydrate.N), "", func(a *arm) float64 { return a.Rehydrate.InfoMs }, "ms", none, "", nil)
		row("… → all verified and re-adopted", "", func(a *arm) float64 { return a.Rehydrate.AllAdoptedMs }, "ms", none, "< 1000 ms", func(v float64) bool { return v < 1000 })
		row("… adopted, per the metrics", "", func(a *arm) float64 { return float64(a.Rehydrate.AdoptedMetric) }, "", none, "", nil)
	}

	if ran("readiness") || ran("bulk") {
		p("\nWhere a create's time goes, per the daemon's `agent_control_plane_sandbox_create_step_seconds_total` (ms; one at a time: the median per step; %d at once: the mean):\n\n", r.Bulk)
		p("| step | one create, %s | one create, %s | %d at once, %s | %d at once, %s |\n|---|---:|---:|---:|---:|\n", on.Label, off.Label, r.Bulk, on.Label, r.Bulk, off.Label)
		var sum [4]float64
		for _, step := range supervisor.CreateSteps {
			v := [4]float64{on.Steps[step], off.Steps[step], on.BulkSteps[step], off.BulkSteps[step]}
			for i := range v {
				sum[i] += v[i]
			}
			p("| %s | %.3f | %.3f | %.3f | %.3f |\n", step, v[0], v[1], v[2], v[3])
		}
		p("| sum (the medians' sum is not a median) | %.3f | %.3f | %.3f | %.3f |\n\n", sum[0], sum[1], sum[2], sum[3])
	}

	if r.Docker.Skipped != "" {
		p("Docker: skipped (%s).\n\n", r.Docker.Skipped)
	} else if r.Docker.Floor.N > 0 {
		d := r.Docker
		p("Docker (cgroups on): the image started through the engine API → answers %.2f ms (p99 %.2f); a docker create → the container answers %.2f ms (p99 %.2f), %+.2f ms (goal ≤ floor + 20 ms: %s).\n\n",
			d.Floor.Median, d.Floor.P99, d.ChildAnswers.Median, d.ChildAnswers.P99, d.ChildAnswers.Median-d.Floor.Median, goal(d.ChildAnswers.Median-d.Floor.Median <= 20))
		if d.ExecuteSkipped != "" {
			p("Docker's execute: skipped (%s).\n\n", d.ExecuteSkipped)
		} else if d.Execute.N > 0 {
			p("Docker: Daytona's execute of `true` %.2f ms (p99 %.2f) against the engine's exec of the same shell command from here %.2f ms (p99 %.2f): %+.2f ms, ×%.2f (goal ≤ floor + 2 ms: %s).\n\n",
				d.Execute.Median, d.Execute.P99, d.ExecuteFloor.Median, d.ExecuteFloor.P99, d.Execute.Median-d.ExecuteFloor.Median, ratio(d.Execute.Median, d.ExecuteFloor.Median), goal(d.Execute.Median <= d.ExecuteFloor.Median+2))
		}
	}
	if e := r.Events; e.Subscribers > 0 {
		p("Events (cgroups on): kill -9 → the event at each of %d subscribers, creates running: median %.2f ms, p99 %.2f ms (goal p99 < 5 ms: %s); no other load: median %.2f ms, p99 %.2f ms; missed: %d (%s).\n\n",
			e.Subscribers, e.Delivery.Median, e.Delivery.P99, goal(e.Delivery.P99 < 5), e.Quiet.Median, e.Quiet.P99, e.Missed, goal(e.Missed == 0))
	}
	r.isolated(p)
	if t := r.Toolbox; t.Exec.N > 0 {
		p("| toolbox (cgroups on) | floor | through the daemon | ratio |\n|---|---:|---:|---:|\n")
		p("| exec of `true`, round trip (median; floor: fork/exec here) | %.2f ms | %.2f ms | ×%.2f |\n", t.ExecFloor.Median, t.Exec.Median, ratio(t.Exec.Median, t.ExecFloor.Median))
		p("| Daytona's execute of `true`, round trip (median; floor: the same shell spawned here; goal ≤ floor + 2 ms: %s) | %.2f ms | %.2f ms | ×%.2f |\n", goal(t.Execute.Median <= t.ShellFloor.Median+2), t.ShellFloor.Median, t.Execute.Median, ratio(t.Execute.Median, t.ShellFloor.Median))
		p("| upload of %d MiB (floor: a synced file copy) | %.0f MiB/s | %.0f MiB/s | ×%.2f |\n", t.SizeMiB, t.CopyMiBps, t.UploadMiBps, ratio(t.UploadMiBps, t.CopyMiBps))
		p("| download of %d MiB (floor: the file read here) | %.0f MiB/s | %.0f MiB/s | ×%.2f |\n", t.SizeMiB, t.ReadMiBps, t.DownloadMiBps, ratio(t.DownloadMiBps, t.ReadMiBps))
	}
}

// isolated writes the isolated daemon's figures beside the plain native
// ones (cgroups on, the same rounds).
func (r *results) isolated(p func(string, ...any)) {
	if r.IsoSkipped != "" {
		p("Isolated sandboxes: skipped (%s).\n\n", r.IsoSkipped)
		return
	}
	on, iso := &r.On, &r.Iso
	if iso.ChildAnswers.N == 0 && iso.Crash.Plain.N == 0 && r.Toolbox.IsoExec.N == 0 {
		return
	}
	p("| isolated against plain native (medians, same rounds) | %s | %s | difference | goal | |\n|---|---:|---:|---:|---|---|\n", on.Label, iso.Label)
	line := func(name string, plain, isolated float64, goalText string, within float64) {
		verdict := ""
		if within > 0 {
			verdict = goal(isolated-plain <= within)
		}
		p("| %s | %.2f ms | %.2f ms | %+.2f ms | %s | %s |\n", name, plain, isolated, isolated-plain, goalText, verdict)
	}
	if iso.ChildAnswers.N > 0 {
		line("create → agent answers", on.ChildAnswers.Median, iso.ChildAnswers.Median, "≤ plain + 15 ms", 15)
		line("create → `sandbox.started`", on.Started.Median, iso.Started.Median, "", 0)
	}
	if iso.Crash.Plain.N > 0 {
		line("kill -9 → `sandbox.stopped`", on.Crash.Plain.Median, iso.Crash.Plain.Median, "", 0)
		line("… re-adopted after a SIGKILL of the daemon", on.Crash.Readopted.Median, iso.Crash.Readopted.Median, "", 0)
	}
	if t := r.Toolbox; t.IsoExec.N > 0 {
		line("exec of `true`, round trip", t.Exec.Median, t.IsoExec.Median, "≤ plain + 2 ms", 2)
	}
	p("\n")
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
