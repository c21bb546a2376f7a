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
		name: "logs", args: "NAME", summary: "print a sandbox's entrypoint logs (redacted), both streams in write order; -f follows them", minArgs: 1, maxArgs: 1, client: true, names: 1,
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
			fs.FuncP("tail", "n", "only the last `N` lines (of both streams); 0: none (with -f: only what comes next)", lines)
			fs.StringVar(&opts.Since, "since", "", "only lines written since `WHEN`: a duration before now (90s, 10m, 1h30m) or a time (2026-12-01T15:04:05Z, 2026-12-01T15:04:05, 2026-12-01)")
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
			cl := c.client()
			if linesGiven && opts.Lines == 0 {
				if !follow {
					return nil // the last 0 lines
				}
				// Following from now: no line written before it.
				opts.Since = time.Now().UTC().Format(time.RFC3339Nano)
			}
			// Each stream's lines go to the same stream here; with -t a line
			// starts with its time (a long line comes in pieces: only its
			// first is stamped).
			midLine := map[string]bool{}
			print := func(stream, at, text string) error {
				w := c.stdout
				if stream == "stderr" {
					w = c.stderr
				}
				if stamps && !midLine[stream] {
					io.WriteString(w, at+" ")
				}
				midLine[stream] = !strings.HasSuffix(text, "\n")
				_, err := io.WriteString(w, inertLog(text))
				return err
			}
			if follow {
				// With --json, one JSON object per chunk: {"stream","time","text"}.
				enc := json.NewEncoder(c.stdout)
				sb, err := cl.FollowLogs(ctx, args[0], opts, func(stream string, chunk wire.LogChunk) error {
					if c.json {
						return enc.Encode(wire.LogLine{Stream: stream, Time: chunk.Time, Text: chunk.Text})
					}
					return print(stream, chunk.Time, chunk.Text)
				})
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return nil // Ctrl-C: following ends, nothing failed
				}
				if err != nil {
					return err
				}
				if !c.json {
					how := ""
					if sb.ErrorReason != nil && *sb.ErrorReason != "" {
						how = ": " + inert(*sb.ErrorReason)
					}
					fmt.Fprintf(c.stderr, "Sandbox %s is %s%s.\n", inert(sb.ID), c.paint(sb.State), how)
				}
				return nil
			}
			opts.Timestamps = stamps
			logs, err := cl.EntrypointLogs(ctx, args[0], opts)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(logs)
				return nil
			}
			for _, l := range logs.Lines {
				if err := print(l.Stream, l.Time, l.Text); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
