package cli

import (
	"fmt"
	"os"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// client is a client of the daemon the command line names, or, when it
// names none, of the one it finds: $AGENT_CONTROL_PLANE_URL, the address
// file beside the default token file (client.New), else the
// configuration serve would run with (fromConfig).
func (c *cli) client() *client.Client {
	url, token := c.url, c.token
	if url == "" && os.Getenv(client.URLEnv) == "" && auth.FindAddress(os.Getenv) == "" {
		url, token = c.fromConfig(token)
	}
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	cl := client.New(url, opts...)
	cl.Warn = func(s string) { fmt.Fprintln(c.stderr, "warning:", inert(s)) }
	return cl
}

// fromConfig is where the daemon is by the configuration serve would
// run with (the same file and environment), when nothing else says: the
// address it wrote beside the token file the config names, else the
// config's listen address; and that token file's token (token, when
// given, is kept). A config that does not load says nothing.
func (c *cli) fromConfig(token string) (string, string) {
	cfg, err := conf.Load(conf.Sources{})
	if err != nil {
		return "", token
	}
	if token == "" && os.Getenv(auth.TokenEnv) == "" {
		token = cfg.Token
		if token == "" {
			token, _ = auth.ReadFile(cfg.TokenFile)
		}
	}
	if addr := auth.ReadAddress(cfg.TokenFile); addr != "" {
		return addr, token
	}
	if cfg.Listen != conf.DefaultListen {
		return cfg.Listen, token
	}
	return "", token
}
