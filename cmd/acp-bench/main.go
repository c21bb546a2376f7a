// Command acp-bench measures agent-control-plane on this machine: how fast
// a sandbox is ready compared with the same stub started directly, how
// fast a crash is seen, how the daemon behaves with hundreds of children,
// how fast it re-adopts them after a SIGKILL, and how fast events reach
// many subscribers. It starts its own daemon on ephemeral ports and prints
// a Markdown table (or JSON with --json).
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
)

type config struct {
	bin         string
	runs        int
	scale       int
	rehydrate   int
	subscribers int
	bulk        int
	portLo      int
	json        bool
	only        string
	staticBin   string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/agent-control-plane", "agent-control-plane binary")
	flag.IntVar(&c.runs, "runs", 40, "runs per latency measurement")
	flag.IntVar(&c.scale, "scale", 800, "sandboxes started concurrently in the scale test")
	flag.IntVar(&c.rehydrate, "rehydrate", 500, "live children when the daemon is killed and restarted")
	flag.IntVar(&c.subscribers, "subscribers", 100, "SSE subscribers in the event test")
	flag.IntVar(&c.bulk, "bulk", 500, "stubs started at once in the bulk test (directly, then through creates)")
	flag.IntVar(&c.portLo, "port-lo", 10100, "first sandbox port (the range is scale+100 ports, then bulk ports for the floor, kept below the ephemeral range)")
	flag.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	flag.StringVar(&c.staticBin, "static-bin", "bin/agent-control-plane-static", "a static build of agent-control-plane, run as the stub in the docker step's image")
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

type results struct {
	Machine struct {
		CPUs   int    `json:"cpus"`
		Kernel string `json:"kernel"`
		Go     string `json:"go"`
		Model  string `json:"cpuModel"`
	} `json:"machine"`
	Ready struct {
		Floor        stat `json:"floorDirectSpawn"`
		Answered     stat `json:"createAnswered"`
		ChildAnswers stat `json:"createToChildAnswers"`
		// Cgroups is the containment of ChildAnswers; the same without.
		Cgroups               string `json:"cgroups"`
		ChildAnswersNoCgroups stat   `json:"createToChildAnswersCgroupsOff"`
		Started               stat   `json:"createToStartedEvent"`
	} `json:"ready"`
	Crash struct {
		Plain      stat `json:"plain"`
		Grandchild stat `json:"grandchildHoldsStdout"`
		Readopted  stat `json:"readoptedAfterRestart"`
	} `json:"crash"`
	Scale struct {
		N               int     `json:"n"`
		AllStartedMs    float64 `json:"allStartedMs"`
		PortCollisions  int     `json:"portCollisions"`
		RSSIdleMiB      float64 `json:"rssIdleMiB"`
		RSSAtNMiB       float64 `json:"rssAtNMiB"`
		PerSandboxKiB   float64 `json:"perSandboxKiB"`
		List            stat    `json:"listLatency"`
		Goroutines      int     `json:"goroutinesAtN"`
		DaemonThreadsAt int     `json:"daemonThreadsAtN"`
	} `json:"scale"`
	Docker struct {
		Skipped      string `json:"skipped,omitempty"`
		Floor        stat   `json:"floorEngineDirect"`
		ChildAnswers stat   `json:"createToContainerAnswers"`
	} `json:"docker"`
	Bulk struct {
		N             int     `json:"n"`
		FloorMs       float64 `json:"floorAllAnsweredMs"`
		AllAnsweredMs float64 `json:"createsAllAnsweredMs"`
	} `json:"bulk"`
	Rehydrate struct {
		N             int     `json:"n"`
		InfoMs        float64 `json:"untilInfoMs"`
		AllAdoptedMs  float64 `json:"untilAllAdoptedMs"`
		AdoptedMetric int     `json:"adoptedPerMetrics"`
	} `json:"rehydrate"`
	Toolbox struct {
		ExecFloor     stat    `json:"execFloorForkExec"`
		Exec          stat    `json:"execRoundTrip"`
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
	root, err := os.MkdirTemp("", "acp-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	// The API listens just below the sandbox range, outside the ephemeral
	// range: polling a dead ephemeral port can self-connect and take it.
	d := &daemon{bin: c.bin, root: root, addr: "127.0.0.1:" + strconv.Itoa(c.portLo-1),
		portLo: c.portLo, portHi: c.portLo + max(c.scale, c.bulk) + 99}
	if err := d.start(); err != nil {
		return nil, err
	}
	defer d.cleanup()

	steps := []struct {
		name string
		run  func(config, *daemon, *results) error
	}{
		{fmt.Sprintf("readiness: %d runs", c.runs), benchReady},
		{fmt.Sprintf("readiness with cgroups off: %d runs", c.runs), benchReadyWithoutCgroups},
		{fmt.Sprintf("bulk: %d stubs at once, directly and through creates", c.bulk), benchBulk},
		{fmt.Sprintf("docker: %d runs", c.runs), benchDocker},
		{fmt.Sprintf("crash detection: 3 × %d runs", c.runs), benchCrash},
		{fmt.Sprintf("scale: %d sandboxes", c.scale), benchScale},
		{fmt.Sprintf("rehydration: %d live children", c.rehydrate), benchRehydrate},
		{fmt.Sprintf("events: %d subscribers", c.subscribers), benchEvents},
		{fmt.Sprintf("toolbox: %d exec round trips, file transfers", c.runs), benchToolbox},
	}
	for _, step := range steps {
		if !selected(c.only, step.name) {
			continue
		}
		progress("%s", step.name)
		if err := step.run(c, d, r); err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return r, nil
}
