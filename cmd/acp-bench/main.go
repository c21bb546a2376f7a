// Command acp-bench measures agent-control-plane on this machine against
// floors measured in the same run: how fast a sandbox is ready compared
// with the same stub started directly, where a create's time goes (the
// daemon's per-step metrics), how fast a crash is seen compared with a
// pidfd wait, how 500 creates and 500 stops at once compare with a Go
// program spawning and signalling 500 stubs, the daemon's memory at 500
// and 800 sandboxes, how fast it re-adopts them after a SIGKILL, and how
// fast events reach many subscribers. It runs two daemons side by side,
// with cgroups as the machine allows and with cgroups off, their rounds
// interleaved in random order with the floor's, and prints a Markdown
// table (or JSON with --json).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
)

type config struct {
	bin         string
	runs        int
	scale       int
	rehydrate   int
	subscribers int
	bulk        int
	bulkRounds  int
	portLo      int
	json        bool
	only        string
	staticBin   string
	versus      string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/agent-control-plane", "agent-control-plane binary")
	flag.IntVar(&c.runs, "runs", 40, "runs per latency measurement")
	flag.IntVar(&c.scale, "scale", 800, "sandboxes started concurrently in the scale test")
	flag.IntVar(&c.rehydrate, "rehydrate", 500, "live children when the daemon is killed and restarted")
	flag.IntVar(&c.subscribers, "subscribers", 100, "SSE subscribers in the event test")
	flag.IntVar(&c.bulk, "bulk", 500, "stubs started at once in the bulk test (directly, then through creates)")
	flag.IntVar(&c.bulkRounds, "bulk-rounds", 3, "rounds of the bulk test (each: the floor and both daemons, in random order)")
	flag.IntVar(&c.portLo, "port-lo", 10100, "first sandbox port (each daemon's range is max(scale, bulk)+100 ports, then the floors' ports, all kept below the ephemeral range)")
	flag.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	flag.StringVar(&c.staticBin, "static-bin", "", "a static build of agent-control-plane, run as the stub in the docker step's image (default: --bin, which make builds static)")
	flag.StringVar(&c.versus, "versus", "", "another agent-control-plane binary (an earlier build, say) to run in place of the cgroups-off daemon, with cgroups as the machine allows: a before and after in one run, rounds interleaved")
	flag.StringVar(&c.only, "only", "", "run only the steps whose names start with one of these, comma-separated (readiness, bulk, docker, crash, scale, rehydration, events, toolbox; rehydration needs scale)")
	flag.Parse()
	if c.rehydrate > c.scale {
		c.rehydrate = c.scale
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		fatal(err)
	}
	c.bin = bin
	r, err := run(c)
	if err != nil {
		fatal(err)
	}
	if c.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	r.markdown(os.Stdout)
}

// selected reports whether the step called name runs under --only.
func selected(only, name string) bool {
	if only == "" {
		return true
	}
	for _, p := range strings.Split(only, ",") {
		if p = strings.TrimSpace(p); p != "" && strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "acp-bench:", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "acp-bench: "+format+"\n", args...)
}

// stat is a latency distribution in milliseconds.
type stat struct {
	N      int     `json:"n"`
	Median float64 `json:"medianMs"`
	P99    float64 `json:"p99Ms"`
	Max    float64 `json:"maxMs"`
}

func summarize(ds []time.Duration) stat {
	if len(ds) == 0 {
		return stat{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return stat{N: len(s), Median: ms(q(0.5)), P99: ms(q(0.99)), Max: ms(s[len(s)-1])}
}

// childSched is a stub's scheduler counts until it answered (proc.Sched),
// over the rounds.
type childSched struct {
	Ran    stat `json:"ran"`
	Waited stat `json:"waitedForCPU"`
}

func summarizeSched(ss []proc.SchedStat) childSched {
	var ran, waited []time.Duration
	for _, s := range ss {
		ran, waited = append(ran, s.Ran), append(waited, s.Waited)
	}
	return childSched{Ran: summarize(ran), Waited: summarize(waited)}
}

// arm is what one daemon measured: the default one (cgroups as the
// machine allows) or the one with cgroups off.
type arm struct {
	Cgroups string `json:"cgroups"`
	// Label names the arm in the report: "cgroups on (hybrid)", "cgroups
	// off", or the --versus binary's.
	Label string `json:"label"`
	// Readiness, one create at a time.
	Answered     stat `json:"createAnswered"`
	ChildAnswers stat `json:"createToChildAnswers"`
	Started      stat `json:"createToStartedEvent"`
	// DaemonCPU is the daemon's CPU time (all its threads, from
	// schedstat) from just before a create until its child answers: what
	// the daemon spends beside the child that is starting, on two CPUs.
	DaemonCPU stat `json:"daemonCPUPerCreate"`
	// Child is what the scheduler counted for the child (all its
	// threads) from its spawn until it answered: its CPU time, and its
	// time waiting for a CPU, which the daemon's work beside it adds to.
	Child childSched `json:"childUntilAnswers"`
	// SpawnToAnswer is, per create, the answer's arrival less the steps
	// before the spawn's end (the daemon's own timing, its metrics): the
	// request's time after the child exists, network and JSON included.
	SpawnToAnswer stat `json:"spawnToAnswer"`
	// Steps is the median time of each create step (the daemon's
	// agent_control_plane_sandbox_create_step_seconds_total), in ms.
	Steps map[string]float64 `json:"stepsMs"`
	// BulkSteps is each step's mean during the bulk creates, in ms.
	BulkSteps map[string]float64 `json:"bulkStepsMs"`
	Crash     struct {
		Plain      stat `json:"plain"`
		Grandchild stat `json:"grandchildHoldsStdout"`
		Readopted  stat `json:"readoptedAfterRestart"`
	} `json:"crash"`
	BulkMs float64 `json:"bulkAllAnsweredMs"` // median over rounds
	StopMs float64 `json:"stopAllAnsweredMs"` // median over rounds
	Scale  struct {
		N              int     `json:"n"`
		AllStartedMs   float64 `json:"allStartedMs"`
		PortCollisions int     `json:"portCollisions"`
		RSSIdleMiB     float64 `json:"rssIdleMiB"`
		RSSAt500MiB    float64 `json:"rssAt500MiB"`
		// RSSAt500SettledMiB: the same, once the burst is over.
		RSSAt500SettledMiB float64 `json:"rssAt500SettledMiB"`
		RSSAtNMiB          float64 `json:"rssAtNMiB"`
		PerSandboxKiB      float64 `json:"perSandboxKiB"`
		List               stat    `json:"listLatency"`
		Goroutines         int     `json:"goroutinesAtN"`
		// The Go runtime's own account at N, from the daemon's metrics.
		HeapInuseMiB    float64 `json:"heapInuseMiBAtN"`
		StackInuseMiB   float64 `json:"stackInuseMiBAtN"`
		DaemonThreadsAt int     `json:"daemonThreadsAtN"`
	} `json:"scale"`
	Rehydrate struct {
		N             int     `json:"n"`
		InfoMs        float64 `json:"untilInfoMs"`
		AllAdoptedMs  float64 `json:"untilAllAdoptedMs"`
		AdoptedMetric int     `json:"adoptedPerMetrics"`
	} `json:"rehydrate"`
}

type results struct {
	Machine struct {
		CPUs   int    `json:"cpus"`
		Kernel string `json:"kernel"`
		Go     string `json:"go"`
		Model  string `json:"cpuModel"`
	} `json:"machine"`
	// The floors, each measured in the rounds of what it is the floor of.
	Floor struct {
		// The stub spawned by this program and polled the same way.
		Ready stat `json:"directSpawnToAnswers"`
		// What the scheduler counted for it until it answered.
		ReadyChild childSched `json:"directSpawnChildUntilAnswers"`
		// kill -9 of a stub this program spawned → its wait returns
		// (pidfd).
		Crash stat `json:"killToWait"`
		// The same for stubs as old and as idle as the re-adopted
		// children (their floor).
		CrashAdopted stat `json:"killToWaitAged"`
		// c.bulk stubs spawned at once by this program → all answer.
		BulkMs float64 `json:"bulkAllAnswerMs"`
		// SIGTERM to each of them at once → all reaped.
		StopMs float64 `json:"stopAllReapedMs"`
	} `json:"floor"`
	// Ran names the steps that ran (their first word: --only).
	Ran    []string `json:"ran"`
	Rounds int      `json:"rounds"`
	Bulk   int      `json:"bulk"`
	On     arm      `json:"cgroupsOn"`
	Off    arm      `json:"cgroupsOff"`
	// Iso is a third daemon whose native sandboxes are isolated
	// (cgroups as the machine allows), in the readiness, crash and
	// toolbox steps; IsoSkipped says why not, where the machine cannot.
	Iso        arm    `json:"isolated"`
	IsoSkipped string `json:"isolatedSkipped,omitempty"`
	Docker     struct {
		Skipped      string `json:"skipped,omitempty"`
		Floor        stat   `json:"floorEngineDirect"`
		ChildAnswers stat   `json:"createToContainerAnswers"`
		// Daytona's execute of `true` against the engine's exec of the
		// same shell command.
		ExecuteSkipped string `json:"executeSkipped,omitempty"`
		ExecuteFloor   stat   `json:"executeFloorEngineExec"`
		Execute        stat   `json:"daytonaExecuteRoundTrip"`
	} `json:"docker"`
	Toolbox struct {
		ExecFloor     stat    `json:"execFloorForkExec"`
		Exec          stat    `json:"execRoundTrip"`
		IsoExec       stat    `json:"execRoundTripIsolated"`
		ShellFloor    stat    `json:"executeFloorShell"`
		Execute       stat    `json:"daytonaExecuteRoundTrip"`
		SizeMiB       int     `json:"fileMiB"`
		CopyMiBps     float64 `json:"floorCopyMiBps"`
		ReadMiBps     float64 `json:"floorReadMiBps"`
		UploadMiBps   float64 `json:"uploadMiBps"`
		DownloadMiBps float64 `json:"downloadMiBps"`
	} `json:"toolbox"`
	Events struct {
		Subscribers int  `json:"subscribers"`
		Delivery    stat `json:"killToEventAtEverySubscriber"`
		Quiet       stat `json:"killToEventAtEverySubscriberNoLoad"`
		Missed      int  `json:"missed"`
	} `json:"events"`
}

// bench is the two daemons under test, side by side: on is the default
// (cgroups as the machine allows), off has cgroups turned off. Their
// rounds are interleaved, so a slow moment of the machine falls on both
// and on the floor alike.
type bench struct {
	on, off *daemon
	iso     *daemon // nil: the machine cannot isolate
	// floorPort is the first of the ports the floors' stubs listen on.
	floorPort int
}

// arms pairs each daemon with its figures.
func (b *bench) arms(r *results) []struct {
	d *daemon
	a *arm
} {
	return []struct {
		d *daemon
		a *arm
	}{{b.on, &r.On}, {b.off, &r.Off}}
}

// allArms are arms and, where the machine isolates, the isolated
// daemon's.
func (b *bench) allArms(r *results) []struct {
	d *daemon
	a *arm
} {
	all := b.arms(r)
	if b.iso != nil {
		all = append(all, struct {
			d *daemon
			a *arm
		}{b.iso, &r.Iso})
	}
	return all
}

// eachArm runs f on each daemon in turn, with its figures.
func (b *bench) eachArm(r *results, f func(d *daemon, a *arm) error) error {
	for _, x := range b.arms(r) {
		if err := f(x.d, x.a); err != nil {
			return err
		}
	}
	return nil
}

// run is long because it is the benchmark's one plan: each step's
// daemons, floors and order.
func run(c config) (*results, error) {
	r := &results{}
	r.Machine.CPUs = runtime.NumCPU()
	r.Machine.Go = runtime.Version()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Machine.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				r.Machine.Model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	r.Rounds, r.Bulk = c.runs, c.bulk
	// Each daemon has its own sandbox ports, the floors theirs above
	// them; the APIs listen just below, all outside the ephemeral range
	// (polling a dead ephemeral port can self-connect and take it).
	span := max(c.scale, c.bulk) + 100
	b := &bench{floorPort: c.portLo + 3*span} // above the three daemons' ranges
	envs := [][]string{{"AGENT_CONTROL_PLANE_ISOLATION=off"}, {"AGENT_CONTROL_PLANE_CGROUPS=off", "AGENT_CONTROL_PLANE_ISOLATION=off"}}
	if err := native.Probe(); err != nil {
		r.IsoSkipped = err.Error()
	} else {
		envs = append(envs, []string{"AGENT_CONTROL_PLANE_ISOLATION=namespaces"})
	}
	for i, env := range envs {
		root, err := os.MkdirTemp("", "acp-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(root)
		bin := c.bin
		if c.versus != "" && i == 1 {
			if bin, err = filepath.Abs(c.versus); err != nil {
				return nil, err
			}
			env = nil
		}
		d := &daemon{bin: bin, root: root, addr: "127.0.0.1:" + strconv.Itoa(c.portLo-1-i),
			portLo: c.portLo + i*span, portHi: c.portLo + (i+1)*span - 1, env: env}
		if err := d.start(); err != nil {
			return nil, err
		}
		defer d.cleanup()
		switch i {
		case 0:
			b.on = d
		case 1:
			b.off = d
		default:
			b.iso = d
		}
	}
	for _, x := range b.allArms(r) {
		var info struct {
			Cgroups struct {
				Mode string `json:"mode"`
			} `json:"cgroups"`
		}
		if err := getJSON(x.d.url("/v1/info"), &info); err != nil {
			return nil, err
		}
		x.a.Cgroups = info.Cgroups.Mode
		x.a.Label = "cgroups on (" + x.a.Cgroups + ")"
		if x.a.Cgroups == "off" {
			x.a.Label = "cgroups off"
		}
		if x.d.bin != b.on.bin {
			x.a.Label = filepath.Base(x.d.bin) + ", " + x.a.Label
		}
		if x.d == b.iso {
			x.a.Label = "isolated, " + x.a.Label
		}
	}
	onOnly := func(f func(config, *daemon, *results) error) func(config, *bench, *results) error {
		return func(c config, b *bench, r *results) error { return f(c, b.on, r) }
	}
	steps := []struct {
		name string
		run  func(config, *bench, *results) error
	}{
		{fmt.Sprintf("readiness: %d rounds", c.runs), benchReady},
		{fmt.Sprintf("bulk: %d rounds of %d stubs at once, then stopped at once", c.bulkRounds, c.bulk), benchBulk},
		{fmt.Sprintf("docker: %d runs", c.runs), onOnly(benchDocker)},
		{fmt.Sprintf("crash detection: %d rounds, then %d re-adopted", c.runs, c.runs), benchCrash},
		{fmt.Sprintf("scale: %d sandboxes", c.scale), benchScale},
		{fmt.Sprintf("rehydration: %d live children", c.rehydrate), benchRehydrate},
		{fmt.Sprintf("events: %d subscribers", c.subscribers), onOnly(benchEvents)},
		{fmt.Sprintf("toolbox: %d exec round trips, file transfers", c.runs), benchToolbox},
	}
	for _, step := range steps {
		if !selected(c.only, step.name) {
			continue
		}
		progress("%s", step.name)
		r.Ran = append(r.Ran, strings.TrimSuffix(strings.Fields(step.name)[0], ":"))
		if err := step.run(c, b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return r, nil
}
