package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

func dashboardCommand() command {
	var open, list bool
	var revoke string
	return command{
		name: "dashboard", summary: "print (or --open) a one-time link that signs a browser in; --sessions, --revoke", client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&open, "open", false, "open the link in a browser ($BROWSER, else xdg-open) without putting it in any command line")
			fs.BoolVar(&list, "sessions", false, "list the browsers signed in")
			fs.StringVar(&revoke, "revoke", "", "sign out the browser session `ID`, or all of them with all")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cl := c.client()
			if _, err := cl.Info(ctx); err != nil {
				return err
			}
			switch {
			case list:
				return c.listDashboardSessions(ctx, cl)
			case revoke != "":
				id := revoke
				if id == "all" {
					id = ""
				}
				if err := cl.RevokeDashboardSession(ctx, id); err != nil {
					return err
				}
				if c.json {
					c.printJSON(map[string]string{"revoked": revoke})
				} else if id == "" {
					fmt.Fprintln(c.stdout, "Signed out every browser.")
				} else {
					fmt.Fprintf(c.stdout, "Signed out session %s.\n", inert(id))
				}
				return nil
			}
			link, l, err := cl.BrowserLink(ctx)
			if err != nil {
				return err
			}
			if !open {
				if c.json {
					c.printJSON(map[string]any{"url": link, "expiresAt": l.ExpiresAt})
				} else {
					fmt.Fprintln(c.stdout, link)
					fmt.Fprintln(c.stderr, "The link signs one browser in, once, within a minute.")
				}
				return nil
			}
			return c.openDashboard(ctx, cl, link, l)
		},
	}
}

func (c *cli) listDashboardSessions(ctx context.Context, cl *client.Client) error {
	items, err := cl.DashboardSessions(ctx)
	if err != nil {
		return err
	}
	if c.json {
		c.printJSON(items)
		return nil
	}
	if len(items) == 0 {
		fmt.Fprintln(c.stdout, "No browser is signed in.")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSIGNED IN\tLAST USED\tEXPIRES\tBROWSER")
	for _, s := range items {
		fmt.Fprintf(tw, "%s\t%s ago\t%s ago\tin %s\t%s\n", inert(s.ID), ago(time.Since(s.CreatedAt.Time)),
			ago(time.Since(s.LastUsedAt.Time)), ago(time.Until(s.ExpiresAt.Time)), inert(s.UserAgent))
	}
	return tw.Flush()
}

// openDashboard opens the link in a browser without putting the code in
// any process's argv (which every local user can read in /proc): the
// browser is given a file of mode 0600, in a directory only this user can
// enter, that sends it on to the link, as Jupyter does. The file is
// removed once the link was used, or has expired.
func (c *cli) openDashboard(ctx context.Context, cl *client.Client, link string, l wire.DashboardLink) error {
	dir, err := os.MkdirTemp("", "agent-control-plane-open-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	page := filepath.Join(dir, "dashboard.html")
	// The link holds only [A-Za-z0-9_-] after the daemon's address, but
	// it is escaped anyway.
	esc := html.EscapeString(link)
	body := "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">" +
		"<meta http-equiv=\"refresh\" content=\"0;url=" + esc + "\"><title>agent-control-plane</title>" +
		"<p>Opening the <a href=\"" + esc + "\">agent-control-plane dashboard</a>…</p>\n"
	if err := os.WriteFile(page, []byte(body), 0o600); err != nil {
		return err
	}
	if err := openBrowser(page); err != nil {
		return fmt.Errorf("%w; run agent-control-plane dashboard and open the link it prints", err)
	}
	fmt.Fprintln(c.stderr, "Opening the dashboard in your browser…")
	// Wait for the browser to use the link, then remove the file.
	wait, cancel := context.WithDeadline(ctx, l.ExpiresAt.Time)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		items, err := cl.DashboardSessions(wait)
		if err == nil && slices.ContainsFunc(items, func(s wire.DashboardSession) bool { return s.LinkID == l.LinkID }) {
			if c.json {
				c.printJSON(map[string]any{"signedIn": true})
			} else {
				fmt.Fprintln(c.stdout, "Signed in.")
			}
			return nil
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errors.New("the browser did not use the link within a minute; run agent-control-plane dashboard and open the link it prints")
		case <-tick.C:
		}
	}
}

// openBrowser hands target (a URL or a file) to $BROWSER, else xdg-open,
// and does not wait for it. target must hold no secret: every local user
// can read a process's argv.
func openBrowser(target string) error {
	opener := []string{"xdg-open"}
	if b := strings.Fields(os.Getenv("BROWSER")); len(b) > 0 {
		opener = b
	}
	cmd := exec.Command(opener[0], append(opener[1:], target)...)
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("open a browser (%s): %w", opener[0], err)
	}
	// xdg-open hands the address over and exits: its failure is said.
	// An opener still running after a while is the browser itself.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			why := strings.TrimSpace(errs.String())
			if why == "" {
				why = err.Error()
			}
			return fmt.Errorf("open a browser (%s) failed: %s; open %s yourself", opener[0], inert(why), inert(target))
		}
	case <-time.After(openerWait):
	}
	return nil
}

// openerWait is how long a browser opener is waited for.
const openerWait = 5 * time.Second

func openCommand() command {
	return command{
		name: "open", args: "NAME", summary: "open a running sandbox's preview in a browser ($BROWSER, else xdg-open)", minArgs: 1, maxArgs: 1, client: true, names: 1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			sb, err := c.client().Get(ctx, args[0])
			if err != nil {
				return err
			}
			if !wire.Live(sb.State) {
				return fmt.Errorf("sandbox %s is %s: it has no preview to open", inert(sb.ID), inert(sb.State))
			}
			if err := openBrowser(sb.PreviewURL); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "Opened %s\n", inert(sb.PreviewURL))
			return nil
		},
	}
}
