package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf"
)

// cli is what every client command shares: where the daemon is, whether
// to print JSON, and where output goes.
type cli struct {
	url    string
	token  string
	json   bool
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	color  bool
	// tree is the command tree Run built from commands (completion and man
	// pages are made from it).
	tree     *cobra.Command
	commands []command
}

// bindGlobal binds the global flags to c on fs. The current values are
// the defaults, so that flags given before the command survive the
// command's own flag set.
func (c *cli) bindGlobal(fs *pflag.FlagSet) {
	c.bindRemote(fs)
	c.bindJSON(fs)
}

func (c *cli) bindRemote(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "daemon `URL` (default $AGENT_CONTROL_PLANE_URL, the running daemon's address file, the config's listen, or "+client.DefaultURL+")")
	fs.StringVar(&c.token, "token", c.token, "bearer `token` (default $AGENT_CONTROL_PLANE_TOKEN or the token file, the config's too)")
}

func (c *cli) bindJSON(fs *pflag.FlagSet) {
	fs.BoolVar(&c.json, "json", c.json, "print JSON instead of text")
}

// fail prints err as one line and returns the exit code for it.
// With --json it prints the API's error shape, {"error":{"code",
// "message"}}, to stderr instead.
func (c *cli) fail(err error) int {
	var ae *client.Error
	code, msg, exit := "failed", err.Error(), exitFailure
	switch {
	case errors.Is(err, client.ErrUnavailable):
		code, exit = "no_daemon", exitNoDaemon
	case errors.As(err, &ae):
		code, msg = ae.Code, ae.Message
	}
	switch {
	case c.json:
		c.printError(code, msg)
	case ae != nil:
		fmt.Fprintf(c.stderr, "agent-control-plane: %s: %s\n", inert(ae.Code), inert(ae.Message))
	default:
		fmt.Fprintln(c.stderr, "agent-control-plane:", inert(msg))
	}
	return exit
}

// printError writes an error as the API does, on stderr.
func (c *cli) printError(code, msg string) {
	json.NewEncoder(c.stderr).Encode(wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: msg}})
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// kvFlag is a repeatable KEY=VALUE flag.
type kvFlag map[string]string

func (f kvFlag) String() string { return "" }

func (f kvFlag) Type() string { return "KEY=VALUE" }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	f[k] = v
	return nil
}

// parseInterval reads an interval by the one rule every command uses
// (create --autostop, autostop, keepalive --every, prune --older-than): a
// number of minutes, fractions allowed (Daytona's unit, the config's), or
// a duration with its unit ("90s", "1h30m").
func parseInterval(s string) (time.Duration, error) {
	if d, err := conf.ParseMinutes(s); err == nil {
		return d, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%q: want minutes (e.g. 15 or 0.5) or a duration (e.g. 90s, 24h)", s)
}

// parseMinutes is parseInterval in minutes.
func parseMinutes(s string) (float64, error) {
	d, err := parseInterval(s)
	return d.Minutes(), err
}

// intervalFlag registers an interval flag (parseInterval) on *d.
func intervalFlag(fs *pflag.FlagSet, d *time.Duration, name, usage string) {
	fs.Func(name, usage+" (`minutes`, fractions allowed, or a duration such as 90s)", func(s string) error {
		v, err := parseInterval(s)
		if err == nil {
			*d = v
		}
		return err
	})
}

// minutesFlag registers --autostop; not given leaves *m nil (the daemon's
// default).
func minutesFlag(fs *pflag.FlagSet, m **float64) {
	fs.Func("autostop", "idle `minutes` before auto-stop, fractions allowed, or a duration such as 90s; 0 disables (default: the daemon's)", func(s string) error {
		v, err := parseMinutes(s)
		if err != nil {
			return err
		}
		*m = &v
		return nil
	})
}

// limitFlags registers --cpu, --memory and --pids; a flag not given
// leaves its field nil (the daemon's default, or the current limit).
func limitFlags(fs *pflag.FlagSet, l *wire.Limits) {
	float := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	whole := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	nonNegativeFlag(fs, "cpu", "CPU limit in `CPUs` (0.5 is half a CPU; 0 lifts it)", "a number of CPUs", float, &l.CPU)
	nonNegativeFlag(fs, "memory", "memory limit in `GiB` (0.25 is 256 MiB; 0 lifts it)", "a number of GiB", float, &l.Memory)
	nonNegativeFlag(fs, "pids", "limit on `tasks` (processes and threads; 0 lifts it)", "a whole number", whole, &l.Pids)
}

// nonNegativeFlag registers a flag whose value, parsed by parse, must be
// ≥ 0 (want names it in the error); not given leaves *dst nil.
func nonNegativeFlag[T int64 | float64](fs *pflag.FlagSet, name, usage, want string, parse func(string) (T, error), dst **T) {
	fs.Func(name, usage, func(s string) error {
		v, err := parse(s)
		if err != nil || v < 0 {
			return fmt.Errorf("want %s ≥ 0, got %q", want, s)
		}
		*dst = &v
		return nil
	})
}

// plural is "1 task", "2 tasks".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	if stem, ok := strings.CutSuffix(word, "y"); ok && !strings.ContainsAny(stem[len(stem)-1:], "aeiou") {
		return strconv.FormatInt(n, 10) + " " + stem + "ies"
	}
	for _, end := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(word, end) {
			return strconv.FormatInt(n, 10) + " " + word + "es"
		}
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

// memoryString shows GiB as people read them: "512 MiB", "1.5 GiB",
// "204.8 MiB" (a limit is kept in whole pages, so 0.2 GiB is a little
// less than 204.8 MiB; the exact bytes are in --json).
func memoryString(gib float64) string {
	if gib < 1 {
		return strconv.FormatFloat(math.Round(gib*1024*10)/10, 'f', -1, 64) + " MiB"
	}
	return strconv.FormatFloat(math.Round(gib*100)/100, 'f', -1, 64) + " GiB"
}

// limitsString shows the limits in force, or "none".
func limitsString(sb wire.SandboxInfo) string {
	var parts []string
	if sb.CPU > 0 {
		parts = append(parts, strconv.FormatFloat(sb.CPU, 'f', -1, 64)+" CPU")
	}
	if sb.Memory > 0 {
		parts = append(parts, memoryString(sb.Memory)+" memory")
	}
	if sb.Pids > 0 {
		parts = append(parts, plural(sb.Pids, "task"))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// inert makes text safe to print to a terminal: every C0 and C1 control
// character, ESC and DEL among them, is shown as an escape (\e, \n, \x07,
// \u009b), so that a label, name, error or reason cannot move the cursor,
// retitle the window or clear the screen; so is every bidirectional
// control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), so that
// none can reorder what a line shows (a name that reads as another).
// Invalid UTF-8 is shown as \xNN.
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
		case r >= 0x80 && r < 0xa0, isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isBidi reports whether r is a bidirectional formatting character.
func isBidi(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
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
	return &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr, color: isTerminal(stdout) && !noColor && os.Getenv("TERM") != "dumb"}
}

// paintPad paints state and pads it to width columns: the colour codes
// take no column.
func (c *cli) paintPad(state string, width int) string {
	return c.paint(state) + strings.Repeat(" ", max(0, width-utf8.RuneCountInString(state)))
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
		if d <= 0 {
			// Past due: the daemon stops it at its next check.
			return "at the next check"
		}
		if d > time.Minute {
			d = d.Round(time.Minute) // 14m59s reads as 15m
		}
		return "in " + ago(d)
	case sb.AutoStopInterval == 0 && wire.Live(sb.State):
		return "off"
	}
	return "-"
}

func (c *cli) table(list []wire.SandboxInfo) {
	rows := [][]string{{"NAME", "STATE", "PORT", "AGE", "AUTO-STOP", "LABELS", "REASON"}}
	now := time.Now()
	for _, sb := range list {
		port := "-" // a stopped sandbox holds no port: its number is another's now
		if wire.Live(sb.State) {
			port = strconv.Itoa(sb.Port)
		}
		rows = append(rows, []string{inert(sb.ID), inert(sb.State), port, ago(now.Sub(sb.CreatedAt.Time)),
			autoStopIn(sb, now), labelString(sb.Labels), reason(sb)})
	}
	writeTable(c.stdout, rows, func(row, col int, cell string) string {
		if col == 1 && row > 0 {
			return c.paint(cell) // the state
		}
		return cell
	})
}

// writeTable writes rows (the first the header) in aligned columns,
// each cell passed through paint (nil: none) after its width is
// counted: by hand, not by text/tabwriter, so that colour codes take no
// width.
func writeTable(w io.Writer, rows [][]string, paint func(row, col int, cell string) string) {
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
			if paint != nil {
				cell = paint(n, i, cell)
			}
			line.WriteString(cell)
			if i < len(r)-1 {
				line.WriteString(pad + "  ")
			}
		}
		fmt.Fprintln(w, line.String())
	}
}

// isolationString says a sandbox's isolation and its network policy.
func isolationString(sb wire.SandboxInfo) string {
	s := inert(sb.Isolation)
	switch {
	case sb.NetworkBlockAll:
		s += ", no network"
	case sb.NetworkAllowList != "":
		s += ", network only to " + inert(sb.NetworkAllowList)
	}
	return s
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
	if sb.Snapshot != "" {
		row("Snapshot", inert(sb.Snapshot))
	}
	row("Isolation", isolationString(sb))
	row("Limits", limitsString(sb))
	if u := sb.Usage; u != nil {
		row("Usage", fmt.Sprintf("%.2f CPU seconds, %.1f MiB memory, %s", u.CPUSeconds, float64(u.MemoryBytes)/(1<<20), plural(u.Pids, "task")))
	}
	if wire.Live(sb.State) {
		row("Port", strconv.Itoa(sb.Port))
		row("Preview", inert(sb.PreviewURL))
	}
	row("Labels", labelString(sb.Labels))
	if sb.Workspace != "" {
		row("Workspace", inert(sb.Workspace))
	}
	if len(sb.Logs) > 0 {
		row("Logs", logsString(sb.Logs))
	}
	row("Created", sb.CreatedAt.Local().Format(time.DateTime))
	if sb.StartedAt != nil {
		row("Started", sb.StartedAt.Local().Format(time.DateTime))
	}
	if sb.StoppedAt != nil {
		row("Stopped", sb.StoppedAt.Local().Format(time.DateTime))
	}
	row("Last activity", sb.LastActivityAt.Local().Format(time.DateTime))
	if sb.AutoStopInterval > 0 {
		row("Auto-stop", strconv.FormatFloat(sb.AutoStopInterval, 'f', -1, 64)+" min idle ("+autoStopIn(sb, time.Now())+")")
	} else {
		row("Auto-stop", "off")
	}
	tw.Flush()
}

// logsString says each log's size on disk and its rotation: "stdout
// 5.0 MiB (+ 4.9 MiB rotated, 31 MiB written), stderr 2 KiB".
func logsString(logs []wire.LogSize) string {
	var parts []string
	for _, l := range logs {
		s := l.Stream + " " + bytesString(l.LiveBytes+l.RotatedBytes)
		if l.RotatedBytes > 0 {
			s += " (" + bytesString(l.RotatedBytes) + " of it in " + l.Stream + ".log.1"
			if dropped := l.WrittenBytes - l.LiveBytes - l.RotatedBytes; dropped > 0 {
				s += ", " + bytesString(dropped) + " older rotated away"
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// commandContext ends on SIGINT or SIGTERM.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
