package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// cli is what every client command shares: where the daemon is, whether
// to print JSON, and where output goes.
type cli struct {
	url    string
	token  string
	json   bool
	stdout io.Writer
	stderr io.Writer
	color  bool
}

// newFlags returns a flag set with the shared flags bound to c.
func (c *cli) newFlags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.url, "url", "", "daemon `URL` (default $AGENT_CONTROL_PLANE_URL or "+client.DefaultURL+")")
	fs.StringVar(&c.token, "token", "", "bearer `token` (default $AGENT_CONTROL_PLANE_TOKEN or the token file)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: agent-control-plane %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags that may stand before, between or after positional
// arguments, and checks the number of positionals.
func parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, false
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		fs.Usage()
		return nil, false
	}
	return pos, true
}

func (c *cli) client() *client.Client {
	var opts []client.Option
	if c.token != "" {
		opts = append(opts, client.WithToken(c.token))
	}
	cl := client.New(c.url, opts...)
	cl.Warn = func(s string) { fmt.Fprintln(c.stderr, "warning:", inert(s)) }
	return cl
}

// fail prints err as one line and returns the exit code for it.
func (c *cli) fail(err error) int {
	var ae *client.Error
	switch {
	case errors.Is(err, client.ErrUnavailable):
		fmt.Fprintln(c.stderr, "agent-control-plane:", inert(err.Error()))
		return exitNoDaemon
	case errors.As(err, &ae):
		fmt.Fprintf(c.stderr, "agent-control-plane: %s: %s\n", inert(ae.Code), inert(ae.Message))
	default:
		fmt.Fprintln(c.stderr, "agent-control-plane:", inert(err.Error()))
	}
	return exitFailure
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// kvFlag is a repeatable KEY=VALUE flag.
type kvFlag map[string]string

func (f kvFlag) String() string { return "" }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	f[k] = v
	return nil
}

// inert makes text safe to print to a terminal: every C0 and C1 control
// character, ESC and DEL among them, is shown as an escape (\e, \n, \x07,
// \u009b), so that a label, name, error or reason cannot move the cursor,
// retitle the window or clear the screen. Invalid UTF-8 is shown as \xNN.
// --json output is never passed through it: it stays exact.
func inert(s string) string { return inertText(s, false) }

// inertLog is inert for log text: line breaks and tabs stay, every other
// control character is escaped. The exact bytes are in --json.
func inertLog(s string) string { return inertText(s, true) }

func inertText(s string, keepLines bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == 0x1b:
			b.WriteString(`\e`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newCLI(stdout, stderr io.Writer) *cli {
	_, noColor := os.LookupEnv("NO_COLOR")
	return &cli{stdout: stdout, stderr: stderr, color: isTerminal(stdout) && !noColor && os.Getenv("TERM") != "dumb"}
}

func (c *cli) paint(state string) string {
	if !c.color {
		return state
	}
	code := map[string]string{wire.StateStarted: "32", wire.StateStarting: "33", wire.StateStopped: "31", wire.StateDestroyed: "90"}[state]
	if code == "" {
		return state
	}
	return "\x1b[" + code + "m" + state + "\x1b[0m"
}

// ago renders a duration the way a person reads it: 5s, 3m, 2h, 4d.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = inert(k) + "=" + inert(l[k])
	}
	return strings.Join(parts, ",")
}

func reason(sb wire.SandboxInfo) string {
	if sb.ErrorReason == nil {
		return ""
	}
	return inert(*sb.ErrorReason)
}

// autoStopIn says when an idle sandbox will be stopped.
func autoStopIn(sb wire.SandboxInfo, now time.Time) string {
	switch {
	case sb.AutoStopAt != nil:
		d := sb.AutoStopAt.Sub(now)
		if d > time.Minute {
			d = d.Round(time.Minute) // 14m59s reads as 15m
		}
		return "in " + ago(d)
	case sb.AutoStopInterval == 0 && (sb.State == wire.StateStarting || sb.State == wire.StateStarted):
		return "off"
	}
	return "-"
}

func (c *cli) table(list []wire.SandboxInfo) {
	rows := [][]string{{"NAME", "STATE", "PORT", "AGE", "AUTO-STOP", "LABELS", "REASON"}}
	now := time.Now()
	for _, sb := range list {
		rows = append(rows, []string{inert(sb.ID), inert(sb.State), strconv.Itoa(sb.Port), ago(now.Sub(sb.CreatedAt.Time)),
			autoStopIn(sb, now), labelString(sb.Labels), reason(sb)})
	}
	// Aligned by hand, not by text/tabwriter: the state's colour codes
	// must not count as width.
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for n, r := range rows {
		var line strings.Builder
		for i, cell := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 1 && n > 0 {
				cell = c.paint(cell)
			}
			line.WriteString(cell)
			if i < len(r)-1 {
				line.WriteString(pad + "  ")
			}
		}
		fmt.Fprintln(c.stdout, line.String())
	}
}

func (c *cli) describe(sb wire.SandboxInfo) {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Name", inert(sb.ID))
	row("State", c.paint(inert(sb.State)))
	if r := reason(sb); r != "" {
		row("Reason", r)
	}
	row("Runtime", inert(sb.Runtime))
	row("Port", strconv.Itoa(sb.Port))
	row("Preview", inert(sb.PreviewURL))
	row("Labels", labelString(sb.Labels))
	row("Created", sb.CreatedAt.Local().Format(time.DateTime))
	row("Last activity", sb.LastActivityAt.Local().Format(time.DateTime))
	if sb.AutoStopInterval > 0 {
		row("Auto-stop", strconv.FormatFloat(sb.AutoStopInterval, 'f', -1, 64)+" min idle ("+autoStopIn(sb, time.Now())+")")
	} else {
		row("Auto-stop", "off")
	}
	tw.Flush()
}

// commandContext ends on SIGINT or SIGTERM.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runLs(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("ls", "ls [--label k=v]... [--json]")
	labels := kvFlag{}
	fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable; all must match)")
	if _, ok := parse(fs, args, 0, 0); !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	list, err := c.client().List(ctx, labels)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(list)
		return exitOK
	}
	if len(list) == 0 {
		fmt.Fprintln(c.stdout, "No sandboxes. Create one with: agent-control-plane create NAME")
		return exitOK
	}
	c.table(list)
	return exitOK
}

func runCreate(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("create", "create NAME [--label k=v]... [--env K=V]... [--autostop MIN] [--wait]")
	labels, env := kvFlag{}, kvFlag{}
	fs.Var(labels, "label", "label `k=v` (repeatable)")
	fs.Var(env, "env", "environment variable `K=V` for the agent-server (repeatable)")
	autostop := fs.Float64("autostop", -1, "idle `minutes` before auto-stop; 0 disables (default: the daemon's)")
	wait := fs.Bool("wait", false, "wait until the agent-server answers")
	pos, ok := parse(fs, args, 1, 1)
	if !ok {
		return exitUsage
	}
	req := wire.CreateSandboxRequest{Name: pos[0], Labels: labels, EnvVars: env}
	if *autostop >= 0 {
		req.AutoStopInterval = autostop
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	sb, err := cl.Create(ctx, req)
	if err != nil {
		return c.fail(err)
	}
	if *wait {
		if sb, err = cl.WaitForReady(ctx, sb.ID); err != nil {
			return c.fail(err)
		}
	}
	if c.json {
		c.printJSON(sb)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "Created sandbox %s (%s) on port %d: %s\n", inert(sb.ID), c.paint(sb.State), sb.Port, inert(sb.PreviewURL))
	return exitOK
}

func runGet(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("get", "get NAME [--json]")
	pos, ok := parse(fs, args, 1, 1)
	if !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	sb, err := c.client().Get(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(sb)
	} else {
		c.describe(sb)
	}
	return exitOK
}

func runStop(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("stop", "stop NAME [--force]")
	force := fs.Bool("force", false, "kill at once, skipping the grace period")
	pos, ok := parse(fs, args, 1, 1)
	if !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	sb, err := c.client().Stop(ctx, pos[0], *force)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(sb)
	} else {
		fmt.Fprintf(c.stdout, "Stopped %s\n", inert(sb.ID))
	}
	return exitOK
}

func runRm(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("rm", "rm NAME...")
	pos, ok := parse(fs, args, 1, -1)
	if !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	code := exitOK
	for _, id := range pos {
		if err := cl.Delete(ctx, id); err != nil {
			code = c.fail(err)
			continue
		}
		if !c.json {
			fmt.Fprintf(c.stdout, "Deleted %s\n", id)
		}
	}
	return code
}

func runLogs(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("logs", "logs NAME [--json]")
	pos, ok := parse(fs, args, 1, 1)
	if !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	logs, err := c.client().EntrypointLogs(ctx, pos[0])
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(logs)
		return exitOK
	}
	io.WriteString(c.stdout, inertLog(logs.Stdout))
	io.WriteString(c.stderr, inertLog(logs.Stderr))
	return exitOK
}

func runKeepalive(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("keepalive", "keepalive NAME [--every DURATION]")
	every := fs.Duration("every", 0, "repeat every `duration` until interrupted (default: once)")
	pos, ok := parse(fs, args, 1, 1)
	if !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	for {
		if err := cl.RefreshActivity(ctx, pos[0]); err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			return c.fail(err)
		}
		if *every <= 0 {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
	}
}

func runAutostop(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("autostop", "autostop NAME MINUTES   (0 disables)")
	pos, ok := parse(fs, args, 2, 2)
	if !ok {
		return exitUsage
	}
	min, err := strconv.Atoi(pos[1])
	if err != nil || min < 0 {
		fmt.Fprintf(c.stderr, "agent-control-plane: MINUTES must be a whole number ≥ 0, got %q\n", pos[1])
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	sb, err := c.client().SetAutostopInterval(ctx, pos[0], min)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(sb)
	} else if min == 0 {
		fmt.Fprintf(c.stdout, "Auto-stop off for %s\n", inert(sb.ID))
	} else {
		fmt.Fprintf(c.stdout, "%s stops after %d idle minutes (%s)\n", inert(sb.ID), min, autoStopIn(sb, time.Now()))
	}
	return exitOK
}

func runInfo(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("info", "info [--json]")
	if _, ok := parse(fs, args, 0, 0); !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	info, err := cl.Info(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(info)
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "URL:\t%s\nVersion:\t%s (API %s)\nPID:\t%d\nUp:\t%s\nRoot:\t%s\nPorts:\t%s\n",
		cl.URL(), inert(info.Version), inert(info.APIVersion), info.PID, ago(time.Since(info.StartedAt.Time)), inert(info.Root), inert(info.PortRange))
	tw.Flush()
	return exitOK
}

func runDashboard(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("dashboard", "dashboard [--open]")
	open := fs.Bool("open", false, "open the link in a browser (xdg-open)")
	if _, ok := parse(fs, args, 0, 0); !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	if _, err := cl.Info(ctx); err != nil {
		return c.fail(err)
	}
	link, err := cl.BrowserLink()
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(map[string]string{"url": link})
	} else {
		fmt.Fprintln(c.stdout, link)
	}
	if *open {
		if err := exec.Command("xdg-open", link).Start(); err != nil {
			return c.fail(fmt.Errorf("open a browser: %w", err))
		}
	}
	return exitOK
}

func runWatch(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	fs := c.newFlags("watch", "watch [--label k=v]... [--json]")
	labels := kvFlag{}
	fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable)")
	if _, ok := parse(fs, args, 0, 0); !ok {
		return exitUsage
	}
	ctx, cancel := commandContext()
	defer cancel()
	cl := c.client()
	if _, err := cl.Info(ctx); err != nil {
		return c.fail(err)
	}
	enc := json.NewEncoder(c.stdout)
	err := cl.Watch(ctx, labels, func(ev wire.StreamEvent) error {
		if c.json {
			return enc.Encode(ev)
		}
		ts := ev.Time.Local().Format("15:04:05.000")
		if ev.Type == wire.EventSnapshot {
			fmt.Fprintf(c.stdout, "%s  %d sandboxes\n", ts, len(ev.Sandboxes))
			for _, sb := range ev.Sandboxes {
				fmt.Fprintf(c.stdout, "%s  %-10s %s  port %d\n", ts, c.paint(inert(sb.State)), inert(sb.ID), sb.Port)
			}
			return nil
		}
		sb := ev.Sandbox
		line := fmt.Sprintf("%s  %-10s %s  port %d", ts, c.paint(inert(strings.TrimPrefix(ev.Type, "sandbox."))), inert(sb.ID), sb.Port)
		if r := reason(*sb); r != "" {
			line += "  (" + r + ")"
		}
		fmt.Fprintln(c.stdout, line)
		return nil
	})
	if err != nil {
		return c.fail(err)
	}
	return exitOK
}
