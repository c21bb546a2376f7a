package daytona

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/interp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/lsp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Toolbox is what the toolbox needs of the supervisor.
type Toolbox interface {
	Run(ctx context.Context, id string, spec supervisor.RunSpec) (supervisor.RunResult, error)
	Files(id string) (runtime.Files, error)
	CreateSession(id, sid string) (*shell.Session, error)
	Sessions(id string) ([]*shell.Session, error)
	Session(id, sid string) (*shell.Session, error)
	DeleteSession(id, sid string) error
	SessionRun(id, sid, line string) (*shell.Command, error)
	SessionInput(id, sid, cid, data string) error
	CommandOutput(id string, c *shell.Command) supervisor.CommandOutput
	FollowCommand(ctx context.Context, id string, c *shell.Command, emit func(stderr bool, text string) error) error
	EntrypointLogs(ctx context.Context, id string, q supervisor.LogQuery) (supervisor.Logs, error)
	FollowLogs(ctx context.Context, id string, q supervisor.LogQuery, emit func(supervisor.LogChunk) error) (supervisor.Sandbox, error)
	OpenTerminal(id string, spec terminal.Spec, argv []string) (*terminal.Terminal, error)
	Terminals(id string) ([]*terminal.Terminal, error)
	Terminal(id, tid string) (*terminal.Terminal, error)
	TerminalInput(id, tid string, p []byte) error
	ResizeTerminal(id, tid string, cols, rows int) (terminal.Info, error)
	CloseTerminal(id, tid string) error
	CreateContext(id, cwd string) (*interp.Context, error)
	Contexts(id string) ([]*interp.Context, error)
	DeleteContext(id, cid string) error
	RunCode(ctx context.Context, id, cid, code string, envs map[string]string, timeout time.Duration, emit func(interp.Message) error) error
	StartLanguageServer(ctx context.Context, id, language, project string) error
	StopLanguageServer(id, language, project string) error
	LanguageServer(id, language, project string) (*lsp.Server, error)
	OpenDocument(ctx context.Context, id, language, project, uri string) error
}

// DefaultExecTimeout is how long execute lets a command run when the
// request does not say (Daytona's document: 10 seconds).
const DefaultExecTimeout = 10 * time.Second

// toolboxRoutes are Daytona's toolbox, relative to toolboxProxyUrl/{id}.
func (a *API) toolboxRoutes() []Route {
	p := ToolboxPath + "/{id}"
	out := []Route{
		{"DELETE", p + "/files", a.deleteFile, true, true, false},
		{"GET", p + "/files", a.listFiles, false, true, false},
		{"POST", p + "/files/bulk-download", a.bulkDownload, false, true, false},
		{"POST", p + "/files/bulk-upload", a.bulkUpload, true, true, true},
		{"GET", p + "/files/download", a.download, false, true, false},
		{"GET", p + "/files/find", a.findInFiles, false, true, false},
		{"POST", p + "/files/folder", a.createFolder, true, true, false},
		{"GET", p + "/files/info", a.fileInfo, false, true, false},
		{"POST", p + "/files/move", a.moveFile, true, true, false},
		{"POST", p + "/files/permissions", a.setPermissions, true, true, false},
		{"POST", p + "/files/replace", a.replaceInFiles, true, true, false},
		{"GET", p + "/files/search", a.searchFiles, false, true, false},
		{"POST", p + "/files/upload", a.upload, true, true, true},
		{"POST", p + "/process/code-run", a.codeRun, true, true, false},
		{"POST", p + "/process/execute", a.execute, true, true, false},
		{"GET", p + "/process/session", a.listSessions, false, true, false},
		{"POST", p + "/process/session", a.createSession, true, true, false},
		{"DELETE", p + "/process/session/{sid}", a.deleteSession, true, true, false},
		{"GET", p + "/process/session/{sid}", a.getSession, false, true, false},
		{"GET", p + "/process/session/{sid}/command/{cid}", a.getCommand, false, true, false},
		{"POST", p + "/process/session/{sid}/command/{cid}/input", a.sendInput, true, true, false},
		{"GET", p + "/process/session/{sid}/command/{cid}/logs", a.commandLogs, false, true, false},
		{"POST", p + "/process/session/{sid}/exec", a.sessionExec, true, true, false},
		{"GET", p + "/user-home-dir", a.userHomeDir, false, true, false},
		{"GET", p + "/version", a.version, false, true, false},
		{"GET", p + "/work-dir", a.workDir, false, true, false},
	}
	// What the toolbox does not have answers, at each of its paths and
	// for every method, a 400 naming it.
	out = append(out, a.gitRoutes(p)...)
	out = append(out, a.ptyRoutes(p)...)
	out = append(out, a.interpreterRoutes(p)...)
	out = append(out, a.lspRoutes(p)...)
	out = append(out, refusedExcept(p+"/git", "this git operation", "Daytona's toolbox has no such route", out)...)
	for _, f := range []struct{ paths, what, why string }{
		{"/computeruse", "computer use", "there is no desktop in a sandbox here"},
	} {
		out = append(out, refused(p+f.paths, f.what, f.why)...)
	}
	// The entrypoint's logs are the sandbox's own output, read as its
	// logs are elsewhere: nothing inside is reached.
	return append(out,
		Route{"GET", p + "/process/session/entrypoint", a.entrypointSession, false, false, false},
		Route{"GET", p + "/process/session/entrypoint/logs", a.entrypointLogs, false, false, false},
	)
}

// refusedExcept are refused's routes of path that no route of have
// takes already.
func refusedExcept(path, what, why string, have []Route) []Route {
	taken := map[string]bool{}
	for _, rt := range have {
		taken[rt.Method+" "+rt.Path] = true
	}
	var out []Route
	for _, rt := range refused(path, what, why) {
		if !taken[rt.Method+" "+rt.Path] {
			out = append(out, rt)
		}
	}
	return out
}

// refusedMethods are the methods a refused feature's paths answer.
var refusedMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// refused are the routes of a feature this daemon does not have: path
// and every path below it, for every method, each a 400 naming it.
func refused(path, what, why string) []Route {
	h := unsupported(what, why)
	var out []Route
	for _, p := range []string{path, path + "/{rest...}"} {
		for _, m := range refusedMethods {
			out = append(out, Route{m, p, h, false, false, false})
		}
	}
	return out
}

func (a *API) files(w http.ResponseWriter, r *http.Request) (runtime.Files, bool) {
	f, err := a.sup.Files(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return nil, false
	}
	return f, true
}

// fileError answers a file operation's error.
func (a *API) fileError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, runtime.ErrOutside):
		WriteError(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		WriteError(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, fs.ErrExist):
		WriteError(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, fs.ErrInvalid):
		WriteError(w, r, http.StatusBadRequest, err.Error())
	default:
		a.fail(w, r, err, wire.CodeInternal)
	}
}

func required(w http.ResponseWriter, r *http.Request, names ...string) ([]string, bool) {
	q := r.URL.Query()
	out := make([]string, len(names))
	for i, n := range names {
		if out[i] = q.Get(n); out[i] == "" {
			badRequest(w, r, n+" is required")
			return nil, false
		}
	}
	return out, true
}

func (a *API) workDir(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"dir": f.WorkDir()})
}

// userHomeDir: a sandbox here has no home of its own; commands run in
// its workspace, which is also where it may keep files.
func (a *API) userHomeDir(w http.ResponseWriter, r *http.Request) {
	a.workDir(w, r)
}

func (a *API) version(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.files(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": a.opts.Version})
}

// ExecuteRequest and ExecuteResponse are Daytona's.
type ExecuteRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
	Timeout *int              `json:"timeout,omitempty"` // seconds
}

type ExecuteResponse struct {
	Result   string `json:"result"`
	ExitCode int    `json:"exitCode"`
}

// execute runs one command line with the sandbox's shell reading it on
// its input, its stdout and stderr combined in the order they came, its
// exit code the shell's; a shell that cannot start answers exit code -1
// with why. A timeout or a client that goes away kills the command's
// whole process group.
func (a *API) execute(w http.ResponseWriter, r *http.Request) {
	var b ExecuteRequest
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if strings.TrimSpace(b.Command) == "" {
		badRequest(w, r, "command is required")
		return
	}
	timeout, ok := execTimeout(w, r, b.Timeout)
	if !ok {
		return
	}
	// The sandbox's shell reads the command on its input, as Daytona's
	// toolbox does: the SDKs send the line as their user wrote it.
	spec := supervisor.RunSpec{Argv: supervisor.ShellArgv, Stdin: strings.NewReader(script(b.Command)), Env: b.Envs, Dir: b.Cwd, Timeout: timeout}
	result, code, ok := a.run(w, r, spec, func(err error) {
		writeJSON(w, http.StatusOK, ExecuteResponse{Result: err.Error(), ExitCode: -1})
	})
	if ok {
		writeJSON(w, http.StatusOK, ExecuteResponse{Result: result, ExitCode: code})
	}
}

// script is code as a program reads it on its input: its last line
// ended, so that it is run, not left unfinished.
func script(code string) string {
	if !strings.HasSuffix(code, "\n") {
		code += "\n"
	}
	return code
}

// execTimeout is a request's timeout in seconds (Daytona's), or
// DefaultExecTimeout when it gives none; a bad one is answered.
func execTimeout(w http.ResponseWriter, r *http.Request, seconds *int) (time.Duration, bool) {
	if seconds == nil || *seconds == 0 {
		return DefaultExecTimeout, true
	}
	if *seconds < 0 || time.Duration(*seconds)*time.Second > supervisor.MaxRunTimeout {
		badRequest(w, r, fmt.Sprintf("timeout must be 0 to %d seconds", int(supervisor.MaxRunTimeout.Seconds())))
		return 0, false
	}
	return time.Duration(*seconds) * time.Second, true
}

// run runs spec with its output merged, and answers what went wrong
// itself: a bad request, a timeout (408), a program that cannot start
// (notStarted). It returns the output (its tail, marked when cut) and
// the exit code when there is an answer to give.
func (a *API) run(w http.ResponseWriter, r *http.Request, spec supervisor.RunSpec, notStarted func(error)) (string, int, bool) {
	spec.Merged = true
	res, err := a.sup.Run(r.Context(), r.PathValue("id"), spec)
	switch {
	case r.Context().Err() != nil:
		return "", 0, false // the client went away; the command was killed with its request
	case errors.Is(err, runtime.ErrExecStart):
		notStarted(err)
		return "", 0, false
	case errors.Is(err, supervisor.ErrInvalid):
		badRequest(w, r, execFields.Render(err))
		return "", 0, false
	case err != nil:
		a.fail(w, r, err, wire.CodeInternal)
		return "", 0, false
	case res.Exit.Reason == runtime.ReasonTimeout:
		WriteError(w, r, http.StatusRequestTimeout, fmt.Sprintf("command execution timeout: killed after %s", spec.Timeout))
		return "", 0, false
	}
	out := res.Stdout
	if res.Cut {
		out = fmt.Sprintf("[output cut: the last %d bytes]\n", supervisor.MaxRunOutput) + out
	}
	return out, res.Exit.Code, true
}

// execFields are the names Daytona's execute gives the fields the core
// checks.
var execFields = field.Names{field.Env: "envs", field.Argv: "command"}
