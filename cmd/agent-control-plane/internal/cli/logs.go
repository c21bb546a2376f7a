package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The logs command: a sandbox's entrypoint output, followed or not.

// logsCommand prints a sandbox's entrypoint output, followed or not.
//
// It is long because its flags, their conflicts and the two ways of
// reading (once, followed) are declared with the command, as every
// command's are.
func logsCommand() command {
	var (
		follow, stamps, stdout, stderr bool
		opts                           client.LogsOptions
		linesGiven                     bool // -n 0 is none, as docker's
	)
	return command{
		name: "logs", args: "NAME", summary: "print a sandbox's entrypoint logs (redacted), all that is kept, both streams in write order; -f follows them", minArgs: 1, maxArgs: 1, client: true, names: 1,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVarP(&follow, "follow", "f", false, "print lines as they are written, until the sandbox stops (or Ctrl-C)")
			lines := func(v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return errors.New("want a number of lines, 0 or more")
				}
				opts.Lines, linesGiven = n, true
				return nil
			}
			fs.FuncP("tail", "n", "only the last `N` lines (of both streams, within the last MiB of each); 0: none (with -f: only what comes next)", lines)
			fs.StringVar(&opts.Since, "since", "", "only lines written since `WHEN`: a duration before now (90s, 10m, 1h30m) or a time (2026-12-01T15:04:05Z, 2026-12-01T15:04:05, 2026-12-01)")
			fs.StringVar(&opts.Until, "until", "", "only lines written before `WHEN` (as --since; with -f, following ends then)")
			fs.BoolVarP(&stamps, "timestamps", "t", false, "print each line after the time it was written (RFC 3339, UTC)")
			fs.BoolVar(&stdout, "stdout", false, "only the sandbox's stdout")
			fs.BoolVar(&stderr, "stderr", false, "only the sandbox's stderr")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			switch {
			case stdout && stderr:
				return usagef("logs", "--stdout and --stderr together are both streams: give neither")
			case stdout:
				opts.Stream = "stdout"
			case stderr:
				opts.Stream = "stderr"
			}
			if linesGiven && opts.Lines == 0 {
				if !follow {
					return nil // the last 0 lines
				}
				// Following from now: no line written before it.
				opts.Since, linesGiven = time.Now().UTC().Format(time.RFC3339Nano), false
			}
			p := &logPrinter{c: c, stamps: stamps, midLine: map[string]bool{}}
			if !follow && (linesGiven || c.json) {
				return p.tail(ctx, args[0], opts)
			}
			return p.stream(ctx, args[0], opts, follow)
		},
	}
}

// logPrinter prints a sandbox's log lines: each stream's to the same
// stream here, with -t after its time (a long line comes in pieces: only
// its first is stamped).
type logPrinter struct {
	c       *cli
	stamps  bool
	midLine map[string]bool
}

func (p *logPrinter) print(stream, at, text string) error {
	w := p.c.stdout
	if stream == "stderr" {
		w = p.c.stderr
	}
	if p.stamps && !p.midLine[stream] {
		io.WriteString(w, at+" ")
	}
	p.midLine[stream] = !strings.HasSuffix(text, "\n")
	_, err := io.WriteString(w, inertLog(text))
	return err
}

// stream prints every line kept (and, following, what comes), streamed:
// nothing is cut. With --json, one JSON object per chunk:
// {"stream","time","text"}.
func (p *logPrinter) stream(ctx context.Context, name string, opts client.LogsOptions, follow bool) error {
	c := p.c
	cl := c.client()
	enc := json.NewEncoder(c.stdout)
	each := func(stream string, chunk wire.LogChunk) error {
		if c.json {
			return enc.Encode(wire.LogLine{Stream: stream, Time: chunk.Time, Text: chunk.Text})
		}
		return p.print(stream, chunk.Time, chunk.Text)
	}
	if !follow {
		_, err := cl.ReadLogs(ctx, name, opts, each)
		return err
	}
	opts.All = opts.Lines == 0
	if !opts.All {
		opts.TailBytes = maxLogTail
	}
	sb, err := cl.FollowLogs(ctx, name, opts, each)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // Ctrl-C: following ends, nothing failed
	}
	if err != nil || c.json || wire.Live(sb.State) { // --until ended it
		return err
	}
	how := ""
	if sb.ErrorReason != nil && *sb.ErrorReason != "" {
		how = ": " + inert(*sb.ErrorReason)
	}
	fmt.Fprintf(c.stderr, "Sandbox %s is %s%s.\n", inert(sb.ID), c.paint(sb.State), how)
	return nil
}

// maxLogTail is the most of each stream one answer of the daemon holds.
const maxLogTail = 1 << 20

// tail prints the last -n lines, from the last MiB of each stream the
// daemon answers with; when that cut lines that -n asked for, it says so
// on stderr, and how to get them.
func (p *logPrinter) tail(ctx context.Context, name string, opts client.LogsOptions) error {
	c := p.c
	opts.Timestamps, opts.TailBytes = p.stamps, maxLogTail
	logs, err := c.client().EntrypointLogs(ctx, name, opts)
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(logs)
		return nil
	}
	for _, l := range logs.Lines {
		if err := p.print(l.Stream, l.Time, l.Text); err != nil {
			return err
		}
	}
	if logs.Truncated && (opts.Lines == 0 || len(logs.Lines) < opts.Lines) {
		fmt.Fprintf(c.stderr, "agent-control-plane: %s shown, the last MiB of each stream; older lines are kept: without -n, logs prints all of them\n",
			plural(int64(len(logs.Lines)), "line"))
	}
	return nil
}
