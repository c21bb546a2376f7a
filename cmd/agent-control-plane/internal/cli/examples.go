package cli

// examples shows every command people run in use, as its help and man
// page print them (cobra's Example): a comment, then the line.
var examples = map[string]string{
	"serve": `  # the daemon in the foreground, sandboxes' ports from a range of your own
  agent-control-plane serve --port-range 5100-5199`,
	"ensure": `  # in a script: a daemon is there when this returns
  agent-control-plane ensure && agent-control-plane create --wait demo`,
	"run": `  # a sandbox for as long as this command runs, deleted after
  agent-control-plane run --rm --name scratch`,
	"ls": `  agent-control-plane ls --state started
  # delete every stopped sandbox labelled by the web UI
  agent-control-plane ls -q --state stopped --label origin=web | xargs agent-control-plane rm`,
	"create": `  agent-control-plane create --wait demo
  agent-control-plane create --snapshot python --cpu 0.5 --memory 0.25 --autostop 30 --label team=ml api1`,
	"get":     `  agent-control-plane get demo --json`,
	"stop":    `  agent-control-plane stop demo`,
	"start":   `  agent-control-plane start --wait demo`,
	"restart": `  agent-control-plane restart --wait demo`,
	"rm":      `  agent-control-plane rm demo api1`,
	"prune": `  # delete what stopped more than a day ago, without asking
  agent-control-plane prune --older-than 24h --yes`,
	"logs": `  # follow, with times, from the last 100 lines
  agent-control-plane logs -ft -n 100 demo
  agent-control-plane logs --since 10m --stderr demo`,
	"exec": `  agent-control-plane exec demo ls -la
  # a terminal inside, as docker exec -it
  agent-control-plane exec -it demo bash
  echo hi | agent-control-plane exec -i demo cat`,
	"cp": `  agent-control-plane cp data.csv demo:in/
  agent-control-plane cp demo:out/report.txt .
  # a directory, as a tar stream
  agent-control-plane cp demo:src - | tar -t`,
	"shell": `  agent-control-plane shell demo`,
	"watch": `  agent-control-plane watch --label origin=cli`,
	"stats": `  agent-control-plane stats --no-stream --json`,
	"keepalive": `  # keep a sandbox from auto-stopping while this runs
  agent-control-plane keepalive --every 5 demo`,
	"autostop": `  agent-control-plane autostop demo 90s
  agent-control-plane autostop demo 0   # never`,
	"resize":    `  agent-control-plane resize --cpu 1.5 --memory 2 demo`,
	"snapshots": `  agent-control-plane snapshots`,
	"info":      `  agent-control-plane info --json`,
	"dashboard": `  agent-control-plane dashboard --open`,
	"open":      `  agent-control-plane open demo`,
	"install": `  # see first, then install and start
  agent-control-plane install --dry-run
  agent-control-plane install --now`,
	"uninstall": `  agent-control-plane uninstall`,
	"status":    `  agent-control-plane status`,
	"config": `  # what serve would run with, and where each value comes from
  AGENT_CONTROL_PLANE_PORT_RANGE=5100-5199 agent-control-plane config`,
	"completion": `  # bash, this shell only (the bash-completion package is not needed)
  source <(agent-control-plane completion bash)
  # zsh, for good
  agent-control-plane completion zsh > "${fpath[1]}/_agent-control-plane"
  # fish
  agent-control-plane completion fish > ~/.config/fish/completions/agent-control-plane.fish`,
	"man":     `  agent-control-plane man ~/.local/share/man/man1 && man agent-control-plane-logs`,
	"version": `  agent-control-plane version --json`,
}
