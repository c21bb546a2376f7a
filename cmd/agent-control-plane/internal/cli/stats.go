package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// statsEvery is how often stats samples (docker stats: about a second).
const statsEvery = time.Second

// statsCommand shows every live sandbox's use of the machine as a live
// table, as docker stats and kubectl top do.
func statsCommand() command {
	var noStream bool
	labels := kvFlag{}
	return command{
		name: "stats", summary: "every live sandbox's CPU, memory against its limit, tasks and port, live (--no-stream: once)", maxArgs: 0, client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&noStream, "no-stream", false, "print one sample and exit")
			fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cl := c.client()
			o := client.ListOptions{Labels: labels, States: []string{wire.StateStarting, wire.StateStarted}, Usage: true}
			prev, at, err := sample(ctx, cl, o)
			if err != nil {
				return err
			}
			live := isTerminal(c.stdout) && !c.json
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(statsEvery):
				}
				cur, now, err := sample(ctx, cl, o)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				rows := statsRows(prev, cur, now.Sub(at))
				if live {
					fmt.Fprint(c.stdout, "\x1b[H\x1b[2J") // the table redrawn in place
				}
				c.printStats(rows)
				if noStream {
					return nil
				}
				prev, at = cur, now
			}
		},
	}
}

// sample is the live sandboxes with their usage, and when they were read.
func sample(ctx context.Context, cl *client.Client, o client.ListOptions) ([]wire.SandboxInfo, time.Time, error) {
	list, err := cl.ListAll(ctx, o)
	return list, time.Now(), err
}

// statRow is one sandbox's line of stats.
type statRow struct {
	Name        string  `json:"name"`
	CPUPercent  float64 `json:"cpuPercent"` // of one CPU, over the last sample
	MemoryBytes int64   `json:"memoryBytes"`
	MemoryLimit int64   `json:"memoryLimitBytes,omitempty"` // 0: none
	Tasks       int64   `json:"tasks"`
	Port        int     `json:"port,omitempty"`
	known       bool    // the runtime says what it uses
}

// statsRows are cur's sandboxes, their CPU share over d from prev.
func statsRows(prev, cur []wire.SandboxInfo, d time.Duration) []statRow {
	before := map[string]float64{}
	for _, sb := range prev {
		if sb.Usage != nil {
			before[sb.ID] = sb.Usage.CPUSeconds
		}
	}
	var rows []statRow
	for _, sb := range cur {
		r := statRow{Name: sb.ID, Port: sb.Port, MemoryLimit: int64(sb.Memory * (1 << 30))}
		if u := sb.Usage; u != nil {
			r.known, r.MemoryBytes, r.Tasks = true, u.MemoryBytes, u.Pids
			if was, ok := before[sb.ID]; ok && d > 0 && u.CPUSeconds >= was {
				r.CPUPercent = (u.CPUSeconds - was) / d.Seconds() * 100
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// printStats prints rows as a table, or with --json as one array.
func (c *cli) printStats(rows []statRow) {
	if c.json {
		if rows == nil {
			rows = []statRow{}
		}
		c.printJSON(rows)
		return
	}
	table := [][]string{{"NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "TASKS", "PORT"}}
	for _, r := range rows {
		cpu, mem, pct, tasks := "-", "-", "-", "-"
		if r.known {
			cpu = fmt.Sprintf("%.1f%%", r.CPUPercent)
			mem = bytesString(r.MemoryBytes) + " / "
			if r.MemoryLimit > 0 {
				mem += bytesString(r.MemoryLimit)
				pct = fmt.Sprintf("%.1f%%", float64(r.MemoryBytes)/float64(r.MemoryLimit)*100)
			} else {
				mem += "no limit"
			}
			tasks = strconv.FormatInt(r.Tasks, 10)
		}
		port := "-"
		if r.Port > 0 {
			port = strconv.Itoa(r.Port)
		}
		table = append(table, []string{inert(r.Name), cpu, mem, pct, tasks, port})
	}
	writeTable(c.stdout, table, nil)
}

// bytesString is n bytes as people read them: 300 B, 512 KiB, 14.1 MiB,
// 2.0 GiB.
func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d B", n)
	}
}
