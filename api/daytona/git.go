package daytona

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Daytona's git, through the git in the sandbox: each operation one git
// command in the repository's directory (which must lie in the
// workspace), non-interactive as every toolbox command is, credentials
// given to git by a helper that reads them from its environment: never in
// its argv (the process table), its output or a log.

// GitTimeout bounds one git operation (a clone or a push of a large
// repository takes a while).
const GitTimeout = 10 * time.Minute

// Daytona's git requests and answers.
type (
	GitCloneRequest struct {
		URL             string `json:"url"`
		Path            string `json:"path"`
		Branch          string `json:"branch,omitempty"`
		CommitID        string `json:"commit_id,omitempty"`
		Username        string `json:"username,omitempty"`
		Password        string `json:"password,omitempty"`
		InsecureSkipTLS bool   `json:"insecure_skip_tls,omitempty"`
	}
	GitRepoRequest struct {
		Path     string `json:"path"`
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
	}
	GitBranchRequest struct {
		Path string `json:"path"`
		Name string `json:"name"`
	}
	GitCheckoutRequest struct {
		Path   string `json:"path"`
		Branch string `json:"branch"`
	}
	GitAddRequest struct {
		Path  string   `json:"path"`
		Files []string `json:"files"`
	}
	GitCommitRequest struct {
		Path       string `json:"path"`
		Message    string `json:"message"`
		Author     string `json:"author"`
		Email      string `json:"email"`
		AllowEmpty bool   `json:"allow_empty,omitempty"`
	}
	GitStatus struct {
		CurrentBranch   string       `json:"currentBranch"`
		Ahead           int          `json:"ahead"`
		Behind          int          `json:"behind"`
		BranchPublished bool         `json:"branchPublished"`
		FileStatus      []FileStatus `json:"fileStatus"`
	}
	FileStatus struct {
		Name     string `json:"name"`
		Staging  string `json:"staging"`
		Worktree string `json:"worktree"`
		Extra    string `json:"extra"`
	}
)

// credentialHelper gives git the username and password of its
// environment; the values never pass through an argv.
const credentialHelper = `!f() { test "$1" = get && printf 'username=%s\npassword=%s\n' "$ACP_GIT_USERNAME" "$ACP_GIT_PASSWORD"; }; f`

func (a *API) gitRoutes(p string) []Route {
	return []Route{
		{"POST", p + "/git/add", a.gitAdd, true, true, false},
		{"DELETE", p + "/git/branches", a.gitDeleteBranch, true, true, false},
		{"GET", p + "/git/branches", a.gitBranches, false, true, false},
		{"POST", p + "/git/branches", a.gitCreateBranch, true, true, false},
		{"POST", p + "/git/checkout", a.gitCheckout, true, true, false},
		{"POST", p + "/git/clone", a.gitClone, true, true, false},
		{"POST", p + "/git/commit", a.gitCommit, true, true, false},
		{"GET", p + "/git/history", a.gitHistory, false, true, false},
		{"POST", p + "/git/pull", a.gitPull, true, true, false},
		{"POST", p + "/git/push", a.gitPush, true, true, false},
		{"GET", p + "/git/status", a.gitStatus, false, true, false},
	}
}

// git runs git's op (args after any -c options) in dir, a directory of
// the workspace, with the credentials when a username or password is
// given, through the toolbox's run; a failure is answered (git's own
// words, in a 400). It returns git's output.
func (a *API) git(w http.ResponseWriter, r *http.Request, op, dir, username, password string, args ...string) (string, bool) {
	f, ok := a.files(w, r)
	if !ok {
		return "", false
	}
	if dir == "" {
		badRequest(w, r, "path is required")
		return "", false
	}
	resolved, err := f.Resolve(r.Context(), dir)
	if err != nil {
		a.fileError(w, r, err)
		return "", false
	}
	argv := []string{"git"}
	var env map[string]string
	if username != "" || password != "" {
		argv = append(argv, "-c", "credential.helper=", "-c", "credential.helper="+credentialHelper)
		env = map[string]string{"ACP_GIT_USERNAME": username, "ACP_GIT_PASSWORD": password}
	}
	spec := supervisor.RunSpec{Argv: append(argv, args...), Env: env, Dir: resolved, Timeout: GitTimeout}
	out, code, ok := a.run(w, r, spec, func(err error) {
		if errors.Is(err, runtime.ErrProgramNotFound) {
			badRequest(w, r, "git is not installed in the sandbox")
		} else {
			badRequest(w, r, fmt.Sprintf("git %s: %v", op, err))
		}
	})
	if ok && code != 0 {
		badRequest(w, r, fmt.Sprintf("git %s: %s", op, strings.TrimSpace(out)))
		return "", false
	}
	return out, ok
}

func (a *API) gitClone(w http.ResponseWriter, r *http.Request) {
	var b GitCloneRequest
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.URL == "" || b.Path == "" {
		badRequest(w, r, "url and path are required")
		return
	}
	args := []string{"clone"}
	if b.InsecureSkipTLS {
		args = []string{"-c", "http.sslVerify=false", "clone"}
	}
	if b.Branch != "" {
		args = append(args, "--branch", b.Branch)
	}
	// The clone runs in the workspace; "--" keeps a url or path that
	// begins with a dash from being read as an option.
	if _, ok := a.git(w, r, "clone", ".", b.Username, b.Password, append(args, "--", b.URL, b.Path)...); !ok {
		return
	}
	if b.CommitID != "" {
		if _, ok := a.git(w, r, "checkout", b.Path, "", "", "checkout", "--detach", b.CommitID); !ok {
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (a *API) gitStatus(w http.ResponseWriter, r *http.Request) {
	out, ok := a.git(w, r, "status", r.URL.Query().Get("path"), "", "", "status", "--porcelain=v2", "--branch", "-z")
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, parseStatus(out))
}

// parseStatus reads git status --porcelain=v2 --branch -z.
func parseStatus(out string) GitStatus {
	st := GitStatus{FileStatus: []FileStatus{}}
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		line := fields[i]
		switch {
		case strings.HasPrefix(line, "# branch.head "):
			st.CurrentBranch = strings.TrimPrefix(line, "# branch.head ")
		case strings.HasPrefix(line, "# branch.upstream "):
			st.BranchPublished = true
		case strings.HasPrefix(line, "# branch.ab "):
			var ahead, behind int
			fmt.Sscanf(strings.TrimPrefix(line, "# branch.ab "), "+%d -%d", &ahead, &behind)
			st.Ahead, st.Behind = ahead, behind
		case strings.HasPrefix(line, "1 "), strings.HasPrefix(line, "u "):
			f := strings.SplitN(line, " ", 9)
			if len(f) == 9 {
				st.FileStatus = append(st.FileStatus, fileStatus(f[1], f[8], ""))
			}
		case strings.HasPrefix(line, "2 "):
			f := strings.SplitN(line, " ", 10)
			if len(f) == 10 && i+1 < len(fields) {
				i++ // the original name follows
				st.FileStatus = append(st.FileStatus, fileStatus(f[1], f[9], fields[i]))
			}
		case strings.HasPrefix(line, "? "):
			st.FileStatus = append(st.FileStatus, FileStatus{Name: line[2:], Staging: "Untracked", Worktree: "Untracked"})
		}
	}
	if st.CurrentBranch == "(detached)" {
		st.CurrentBranch = "HEAD"
	}
	return st
}

func fileStatus(xy, name, extra string) FileStatus {
	return FileStatus{Name: name, Staging: statusWord(xy[0]), Worktree: statusWord(xy[1]), Extra: extra}
}

// statusWord is Daytona's word for one of git's status letters.
func statusWord(c byte) string {
	switch c {
	case 'M', 'T':
		return "Modified"
	case 'A':
		return "Added"
	case 'D':
		return "Deleted"
	case 'R':
		return "Renamed"
	case 'C':
		return "Copied"
	case 'U':
		return "Updated but unmerged"
	}
	return "Unmodified"
}

func (a *API) gitBranches(w http.ResponseWriter, r *http.Request) {
	out, ok := a.git(w, r, "branch", r.URL.Query().Get("path"), "", "", "branch", "--format=%(refname:short)")
	if !ok {
		return
	}
	branches := []string{}
	for _, b := range strings.Split(strings.TrimSpace(out), "\n") {
		if b != "" {
			branches = append(branches, b)
		}
	}
	writeJSON(w, http.StatusOK, map[string][]string{"branches": branches})
}

func (a *API) gitCreateBranch(w http.ResponseWriter, r *http.Request) {
	var b GitBranchRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}, gitField{"name", &b.Name}) {
		return
	}
	if _, ok := a.git(w, r, "branch", b.Path, "", "", "branch", "--", b.Name); ok {
		w.WriteHeader(http.StatusCreated)
	}
}

func (a *API) gitDeleteBranch(w http.ResponseWriter, r *http.Request) {
	var b GitBranchRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}, gitField{"name", &b.Name}) {
		return
	}
	if _, ok := a.git(w, r, "branch -d", b.Path, "", "", "branch", "-d", "--", b.Name); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

func (a *API) gitCheckout(w http.ResponseWriter, r *http.Request) {
	var b GitCheckoutRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}, gitField{"branch", &b.Branch}) {
		return
	}
	if strings.HasPrefix(b.Branch, "-") {
		badRequest(w, r, "branch must not begin with a dash")
		return
	}
	if _, ok := a.git(w, r, "checkout", b.Path, "", "", "checkout", b.Branch); ok {
		writeJSON(w, http.StatusOK, map[string]any{})
	}
}

func (a *API) gitAdd(w http.ResponseWriter, r *http.Request) {
	var b GitAddRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}) {
		return
	}
	if len(b.Files) == 0 {
		badRequest(w, r, "files are required (. for all)")
		return
	}
	if _, ok := a.git(w, r, "add", b.Path, "", "", append([]string{"add", "--"}, b.Files...)...); ok {
		writeJSON(w, http.StatusOK, map[string]any{})
	}
}

func (a *API) gitCommit(w http.ResponseWriter, r *http.Request) {
	var b GitCommitRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}, gitField{"message", &b.Message}, gitField{"author", &b.Author}, gitField{"email", &b.Email}) {
		return
	}
	args := []string{"-c", "user.name=" + b.Author, "-c", "user.email=" + b.Email, "commit", "--quiet", "-m", b.Message}
	if b.AllowEmpty {
		args = append(args, "--allow-empty")
	}
	if _, ok := a.git(w, r, "commit", b.Path, "", "", args...); !ok {
		return
	}
	hash, ok := a.git(w, r, "rev-parse", b.Path, "", "", "rev-parse", "HEAD")
	if ok {
		writeJSON(w, http.StatusOK, map[string]string{"hash": strings.TrimSpace(hash)})
	}
}

// GitCommitInfo is one commit of a history.
type GitCommitInfo struct {
	Hash      string `json:"hash"`
	Author    string `json:"author"`
	Email     string `json:"email"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
}

// MaxHistory bounds the commits a history answers, newest first.
const MaxHistory = 1000

func (a *API) gitHistory(w http.ResponseWriter, r *http.Request) {
	out, ok := a.git(w, r, "log", r.URL.Query().Get("path"), "", "", "log", "-z", "--max-count="+strconv.Itoa(MaxHistory), "--format=%H%x1f%an%x1f%ae%x1f%B%x1f%aI")
	if !ok {
		return
	}
	history := []GitCommitInfo{}
	for _, rec := range strings.Split(out, "\x00") {
		f := strings.Split(strings.TrimPrefix(rec, "\n"), "\x1f")
		if len(f) == 5 {
			history = append(history, GitCommitInfo{Hash: f[0], Author: f[1], Email: f[2], Message: strings.TrimSpace(f[3]), Timestamp: f[4]})
		}
	}
	writeJSON(w, http.StatusOK, history)
}

func (a *API) gitPush(w http.ResponseWriter, r *http.Request) {
	var b GitRepoRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}) {
		return
	}
	if _, ok := a.git(w, r, "push", b.Path, b.Username, b.Password, "push"); ok {
		writeJSON(w, http.StatusOK, map[string]any{})
	}
}

func (a *API) gitPull(w http.ResponseWriter, r *http.Request) {
	var b GitRepoRequest
	if !decodeGit(w, r, &b, gitField{"path", &b.Path}) {
		return
	}
	if _, ok := a.git(w, r, "pull", b.Path, b.Username, b.Password, "pull", "--no-rebase", "--no-edit"); ok {
		writeJSON(w, http.StatusOK, map[string]any{})
	}
}

// gitField is a field a git request must give: its name and where it is
// decoded.
type gitField struct {
	name string
	v    *string
}

// decodeGit decodes a git request into v and answers a 400 naming the
// first of need that is not given.
func decodeGit(w http.ResponseWriter, r *http.Request, v any, need ...gitField) bool {
	if err := wire.DecodeJSON(r, v); err != nil {
		badRequest(w, r, err.Error())
		return false
	}
	for _, f := range need {
		if *f.v == "" {
			badRequest(w, r, f.name+" is required")
			return false
		}
	}
	return true
}
