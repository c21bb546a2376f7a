package api

import (
	"encoding/json"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
)

// hostGit runs git on this machine, for the repositories the tests serve.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// origin is a bare repository with one commit on main, and a clone of
// it on this machine to push more from.
func origin(t *testing.T) (bare, work string) {
	dir := t.TempDir()
	bare, work = filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	hostGit(t, dir, "init", "--bare", "origin.git")
	hostGit(t, dir, "clone", bare, "work")
	os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644)
	hostGit(t, work, "add", ".")
	hostGit(t, work, "commit", "-m", "first")
	hostGit(t, work, "push", "origin", "main")
	return bare, work
}

// Daytona's git, driven as the SDK does, through the git in the sandbox:
// clone, status, add, commit, branches, checkout, push, pull, history.
//
// It is long because it is one repository's life, each step on what the
// one before made.
func TestDaytonaGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed here: the sandbox's git is what is driven")
	}
	e := newRealEnv(t, nil)
	base := e.toolbox("g1")
	ws := filepath.Join(e.sup.Root(), "g1", "workspace")
	bare, work := origin(t)
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		r := e.do(method, base+path, body)
		if r.code != want {
			t.Fatalf("%s %s: %d %s", method, path, r.code, r.body)
		}
		return r.body
	}
	status := func() daytona.GitStatus {
		var st daytona.GitStatus
		json.Unmarshal(call("GET", "/git/status?path=repo", "", 200), &st)
		return st
	}
	call("POST", "/git/clone", `{"url":"file://`+bare+`","path":"repo"}`, 200)
	if b, _ := os.ReadFile(filepath.Join(ws, "repo", "README")); string(b) != "hello\n" {
		t.Fatalf("the clone holds %q", b)
	}
	if st := status(); st.CurrentBranch != "main" || !st.BranchPublished || len(st.FileStatus) != 0 {
		t.Fatalf("status after the clone: %+v", st)
	}
	os.WriteFile(filepath.Join(ws, "repo", "new.txt"), []byte("new\n"), 0o644)
	if st := status(); len(st.FileStatus) != 1 || st.FileStatus[0].Name != "new.txt" || st.FileStatus[0].Worktree != "Untracked" {
		t.Fatalf("status with a new file: %+v", st)
	}
	call("POST", "/git/add", `{"path":"repo","files":["."]}`, 200)
	if st := status(); st.FileStatus[0].Staging != "Added" {
		t.Fatalf("status after add: %+v", st)
	}
	var commit struct{ Hash string }
	json.Unmarshal(call("POST", "/git/commit", `{"path":"repo","message":"second","author":"Ada","email":"ada@example.com"}`, 200), &commit)
	if len(commit.Hash) != 40 {
		t.Fatalf("commit: %+v", commit)
	}
	if st := status(); st.Ahead != 1 || len(st.FileStatus) != 0 {
		t.Fatalf("status after commit: %+v", st)
	}
	call("POST", "/git/branches", `{"path":"repo","name":"feature"}`, 201)
	var br struct{ Branches []string }
	json.Unmarshal(call("GET", "/git/branches?path=repo", "", 200), &br)
	if !slices.Equal(br.Branches, []string{"feature", "main"}) {
		t.Fatalf("branches: %v", br.Branches)
	}
	call("POST", "/git/checkout", `{"path":"repo","branch":"feature"}`, 200)
	if st := status(); st.CurrentBranch != "feature" {
		t.Fatalf("after checkout: %+v", st)
	}
	call("POST", "/git/checkout", `{"path":"repo","branch":"main"}`, 200)
	call("DELETE", "/git/branches", `{"path":"repo","name":"feature"}`, 204)
	call("POST", "/git/push", `{"path":"repo"}`, 200)
	if got := hostGit(t, bare, "log", "-1", "--format=%H %an %s"); got != commit.Hash+" Ada second\n" {
		t.Fatalf("the origin after the push: %q", got)
	}
	var history []struct{ Hash, Author, Message string }
	json.Unmarshal(call("GET", "/git/history?path=repo", "", 200), &history)
	if len(history) != 2 || history[0].Hash != commit.Hash || history[0].Message != "second" || history[1].Message != "first" {
		t.Fatalf("history: %+v", history)
	}
	hostGit(t, work, "pull", "origin", "main")
	os.WriteFile(filepath.Join(work, "third.txt"), []byte("3\n"), 0o644)
	hostGit(t, work, "add", ".")
	hostGit(t, work, "commit", "-m", "third")
	hostGit(t, work, "push", "origin", "main")
	call("POST", "/git/pull", `{"path":"repo"}`, 200)
	if _, err := os.Stat(filepath.Join(ws, "repo", "third.txt")); err != nil {
		t.Fatalf("after the pull: %v", err)
	}
	// Refused: a path out of the workspace, a missing field, a branch
	// that would be read as an option, git's own failure in its words.
	daytonaError(t, e.do("GET", base+"/git/status?path=../..", ""), 400)
	daytonaError(t, e.do("POST", base+"/git/commit", `{"path":"repo","message":"m"}`), 400)
	daytonaError(t, e.do("POST", base+"/git/checkout", `{"path":"repo","branch":"--orphan"}`), 400)
	if msg := daytonaError(t, e.do("POST", base+"/git/checkout", `{"path":"repo","branch":"no-such"}`), 400); !strings.Contains(msg, "no-such") {
		t.Errorf("git's failure: %q", msg)
	}
}

// A clone over HTTP with credentials: they reach the server, and never
// an answer (nor, given through the helper's environment, an argv).
func TestDaytonaGitCredentials(t *testing.T) {
	const backend = "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Skip("no git-http-backend here: the HTTP clone is not run")
	}
	e := newRealEnv(t, nil)
	base := e.toolbox("g2")
	bare, _ := origin(t)
	const user, pass = "ada", "s3cret-pass-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		(&cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(bare), "GIT_HTTP_EXPORT_ALL=1"}}).ServeHTTP(w, r)
	}))
	defer srv.Close()
	url := srv.URL + "/origin.git"
	msg := daytonaError(t, e.do("POST", base+"/git/clone", `{"url":"`+url+`","path":"nope","password":"wrong-`+pass+`","username":"`+user+`"}`), 400)
	if strings.Contains(msg, pass) {
		t.Fatalf("a failed clone's answer holds the password: %q", msg)
	}
	if r := e.do("POST", base+"/git/clone", `{"url":"`+url+`","path":"repo","username":"`+user+`","password":"`+pass+`"}`); r.code != 200 || strings.Contains(string(r.body), pass) {
		t.Fatalf("clone with credentials: %d %s", r.code, r.body)
	}
}
