package daytona

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// CodeRunRequest and CodeRunResponse are Daytona's.
type CodeRunRequest struct {
	Code     string            `json:"code"`
	Language string            `json:"language"`
	Argv     []string          `json:"argv,omitempty"`
	Envs     map[string]string `json:"envs,omitempty"`
	Timeout  *int              `json:"timeout,omitempty"` // seconds
}

type CodeRunResponse struct {
	Result    string           `json:"result"`
	ExitCode  int              `json:"exitCode"`
	Artifacts CodeRunArtifacts `json:"artifacts"`
}

// CodeRunArtifacts are what a run made besides its output: Daytona's
// charts come from its own interpreter's plotting hooks, which a plain
// interpreter here has not, so there are none.
type CodeRunArtifacts struct {
	Charts []json.RawMessage `json:"charts"`
}

// interpreters run a language's code read on their input, the request's
// argv after it, with the sandbox's own interpreter.
var interpreters = map[string][]string{
	"python":     {"python3", "-"},
	"javascript": {"node", "-"},
}

// codeRun runs code with the sandbox's interpreter for its language,
// its output merged, its exit code the interpreter's. A language with no
// interpreter here, or an interpreter the sandbox does not have, is a
// 400 naming it.
func (a *API) codeRun(w http.ResponseWriter, r *http.Request) {
	var b CodeRunRequest
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	lang := strings.ToLower(b.Language)
	argv, ok := interpreters[lang]
	switch {
	case strings.TrimSpace(b.Code) == "":
		badRequest(w, r, "code is required")
		return
	case lang == "typescript":
		badRequest(w, r, "typescript: not supported by this daemon (no TypeScript runner is bundled); run tsx or ts-node through process/execute")
		return
	case !ok:
		badRequest(w, r, fmt.Sprintf("language %q: want python, javascript or typescript", clip(b.Language)))
		return
	}
	timeout, ok := execTimeout(w, r, b.Timeout)
	if !ok {
		return
	}
	spec := supervisor.RunSpec{Argv: append(append([]string(nil), argv...), b.Argv...), Stdin: strings.NewReader(script(b.Code)), Env: b.Envs, Timeout: timeout}
	result, code, ok := a.run(w, r, spec, func(err error) {
		badRequest(w, r, fmt.Sprintf("%s: %s is not installed in the sandbox (%v)", lang, argv[0], err))
	})
	if ok {
		writeJSON(w, http.StatusOK, CodeRunResponse{Result: result, ExitCode: code, Artifacts: CodeRunArtifacts{Charts: []json.RawMessage{}}})
	}
}
