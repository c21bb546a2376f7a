package host

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// WriteJSON answers v as JSON with status code, never cached.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers an error in the daemon's own shape (/v1's).
func WriteError(w http.ResponseWriter, code wire.ErrorCode, msg string) {
	WriteJSON(w, code.Status(), wire.ErrorBody{Error: wire.ErrorDetail{Code: string(code), Message: msg}})
}

// CodeOf is the error code of a supervisor error and its message, for
// every face; failCode is the code of failures that are not the caller's
// fault, which are logged.
func (s *Server) CodeOf(err error, failCode wire.ErrorCode) (wire.ErrorCode, string) {
	for _, m := range supervisorCodes {
		if errors.Is(err, m.err) {
			if m.code == wire.CodeShuttingDown {
				return m.code, "the daemon is shutting down"
			}
			return m.code, err.Error()
		}
	}
	s.log.Error("request failed", "code", failCode, "err", err)
	return failCode, err.Error()
}

// supervisorCodes maps the supervisor's errors to the API's codes.
var supervisorCodes = []struct {
	err  error
	code wire.ErrorCode
}{
	{supervisor.ErrInvalid, wire.CodeInvalidRequest},
	{supervisor.ErrNotFound, wire.CodeNotFound},
	{supervisor.ErrConflict, wire.CodeNameConflict},
	{supervisor.ErrUnknownSnapshot, wire.CodeUnknownSnapshot},
	{supervisor.ErrProgramNotFound, wire.CodeProgramNotFound},
	{supervisor.ErrImageNotFound, wire.CodeImageNotFound},
	{supervisor.ErrRuntimeUnavailable, wire.CodeRuntimeUnavailable},
	{supervisor.ErrLimitsUnsupported, wire.CodeLimitsUnsupported},
	{supervisor.ErrUnsupportedRuntime, wire.CodeUnsupportedRuntime},
	{supervisor.ErrPortsExhausted, wire.CodePreflightFailed},
	{supervisor.ErrNotRunning, wire.CodeSandboxNotRunning},
	{supervisor.ErrClosed, wire.CodeShuttingDown},
	{supervisor.ErrBusy, wire.CodeBusy},
	{supervisor.ErrTampered, wire.CodePathOutside},
}
