package wire

import "net/http"

// ErrorCode is the code of an error answer, {"error":{"code","message"}}.
// Each is declared here once, with the one HTTP status it answers with;
// api/openapi.yaml's enum lists the same set (a test keeps them equal).
type ErrorCode string

// The error codes.
const (
	CodeInvalidRequest       ErrorCode = "invalid_request"
	CodeUnsupportedRuntime   ErrorCode = "unsupported_runtime"
	CodeUnknownSnapshot      ErrorCode = "unknown_snapshot"
	CodeImageNotFound        ErrorCode = "image_not_found"
	CodeProgramNotFound      ErrorCode = "program_not_found"
	CodeLimitsUnsupported    ErrorCode = "limits_unsupported"
	CodeUnauthorized         ErrorCode = "unauthorized"
	CodeInvalidCode          ErrorCode = "invalid_code"
	CodeForbiddenHost        ErrorCode = "forbidden_host"
	CodeForbiddenOrigin      ErrorCode = "forbidden_origin"
	CodeTokenRequired        ErrorCode = "token_required"
	CodeNotFound             ErrorCode = "not_found"
	CodeMethodNotAllowed     ErrorCode = "method_not_allowed"
	CodeNameConflict         ErrorCode = "name_conflict"
	CodeSandboxNotRunning    ErrorCode = "sandbox_not_running"
	CodeUnsupportedMediaType ErrorCode = "unsupported_media_type"
	CodeTooManyLinks         ErrorCode = "too_many_links"
	CodePathOutside          ErrorCode = "path_outside" // a sandbox file path that leads out of its workspace
	CodeBusy                 ErrorCode = "busy"         // a toolbox bound: too many commands or sessions at once
	CodeTooLarge             ErrorCode = "too_large"    // an upload past its bound
	CodeCreateFailed         ErrorCode = "create_failed"
	CodeStartFailed          ErrorCode = "start_failed"
	CodeStopFailed           ErrorCode = "stop_failed"
	CodeDeleteFailed         ErrorCode = "delete_failed"
	CodeResizeFailed         ErrorCode = "resize_failed"
	CodeInternal             ErrorCode = "internal"
	CodePreflightFailed      ErrorCode = "preflight_failed"
	CodeRuntimeUnavailable   ErrorCode = "runtime_unavailable"
	CodeShuttingDown         ErrorCode = "shutting_down"
)

// statusOf is the one mapping of codes to HTTP statuses.
var statusOf = map[ErrorCode]int{
	CodeInvalidRequest:       http.StatusBadRequest,
	CodeUnsupportedRuntime:   http.StatusBadRequest,
	CodeUnknownSnapshot:      http.StatusBadRequest,
	CodeImageNotFound:        http.StatusBadRequest,
	CodeProgramNotFound:      http.StatusBadRequest,
	CodeLimitsUnsupported:    http.StatusBadRequest,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeInvalidCode:          http.StatusUnauthorized,
	CodeForbiddenHost:        http.StatusForbidden,
	CodeForbiddenOrigin:      http.StatusForbidden,
	CodeTokenRequired:        http.StatusForbidden,
	CodeNotFound:             http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeNameConflict:         http.StatusConflict,
	CodeSandboxNotRunning:    http.StatusConflict,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	CodeTooManyLinks:         http.StatusTooManyRequests,
	CodePathOutside:          http.StatusBadRequest,
	CodeBusy:                 http.StatusTooManyRequests,
	CodeTooLarge:             http.StatusRequestEntityTooLarge,
	CodeCreateFailed:         http.StatusInternalServerError,
	CodeStartFailed:          http.StatusInternalServerError,
	CodeStopFailed:           http.StatusInternalServerError,
	CodeDeleteFailed:         http.StatusInternalServerError,
	CodeResizeFailed:         http.StatusInternalServerError,
	CodeInternal:             http.StatusInternalServerError,
	CodePreflightFailed:      http.StatusServiceUnavailable,
	CodeRuntimeUnavailable:   http.StatusServiceUnavailable,
	CodeShuttingDown:         http.StatusServiceUnavailable,
}

// Status is the HTTP status an answer with code c has (500 for a code
// that is not declared).
func (c ErrorCode) Status() int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorCodes lists every declared code.
func ErrorCodes() []ErrorCode {
	out := make([]ErrorCode, 0, len(statusOf))
	for c := range statusOf {
		out = append(out, c)
	}
	return out
}

// SessionEnvRefused is why a dashboard session may not set a sandbox's
// variables, on either face.
const SessionEnvRefused = "a dashboard session may not set a sandbox's variables: they can make a native sandbox's programs run code as the daemon's user (NODE_OPTIONS, BASH_ENV, LD_PRELOAD…); use the CLI, which holds the token"
