// Package childenv is the policy that builds a sandbox's environment. A
// child inherits nothing wholesale: it gets a short base (PATH, HOME and
// the like), the credentials the daemon forwards to standalone sandboxes,
// the request's own variables, and the variables the daemon owns, in that
// order of precedence. Which keys are forwarded, and which request keys mark
// a sandbox as not standalone, is configuration, not code.
package childenv

import (
	"maps"
	"slices"
)

// NonInteractive keeps every child from waiting on a prompt nobody can
// answer (git's credential prompts, askpass helpers, ssh's password
// prompt, pagers, debconf): a program that would ask fails at once
// instead of hanging. The daemon gives it to each entrypoint (in its
// Base) and the toolbox to each command run without a terminal.
var NonInteractive = map[string]string{
	"GIT_TERMINAL_PROMPT": "0",
	"GCM_INTERACTIVE":     "never",
	"GIT_ASKPASS":         "",
	"SSH_ASKPASS":         "",
	"GIT_SSH_COMMAND":     "ssh -o BatchMode=yes",
	"PAGER":               "cat",
	"GIT_PAGER":           "cat",
	"DEBIAN_FRONTEND":     "noninteractive",
}

// Policy builds environments. The zero Policy gives a child only the
// request's variables and the daemon's own.
type Policy struct {
	// Base is given to every child first.
	Base map[string]string
	// Forward is merged into standalone sandboxes whose request lacks the
	// key (model-provider credentials). Its values are secrets.
	Forward map[string]string
	// ForwardUnless lists request keys that mark a sandbox as started by
	// a harness that brings its own credentials: a request carrying any of
	// them gets nothing forwarded.
	ForwardUnless []string
}

// Build returns the whole environment of one child: base, forwarded
// credentials (standalone requests only), the request, then own, which
// always wins.
func (p Policy) Build(request, own map[string]string) map[string]string {
	env := maps.Clone(p.Base)
	if env == nil {
		env = map[string]string{}
	}
	if p.standalone(request) {
		maps.Copy(env, p.Forward)
	}
	maps.Copy(env, request)
	maps.Copy(env, own)
	return env
}

func (p Policy) standalone(request map[string]string) bool {
	for _, k := range p.ForwardUnless {
		if _, ok := request[k]; ok {
			return false
		}
	}
	return true
}

// Secrets returns the forwarded values, for redaction.
func (p Policy) Secrets() []string { return slices.Collect(maps.Values(p.Forward)) }

// List returns env as sorted KEY=VALUE entries.
func List(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
