// This file is long because it is every files route of Daytona's
// toolbox, which share the form and path handling declared here.

package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/fileops"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// MaxBulkFiles is how many files one bulk upload or download moves.
const MaxBulkFiles = fileops.MaxBatch

// FileInfo is Daytona's FileInfo.
type FileInfo struct {
	Name        string `json:"name"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`
	Permissions string `json:"permissions"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
}

func (a *API) fileInfoOf(fi runtime.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name, IsDir: fi.IsDir(), Size: fi.Size, Mode: fi.Mode.String(),
		Permissions: fmt.Sprintf("%#o", fi.Mode.Perm()), Owner: a.opts.User, Group: a.opts.User,
		ModTime: fi.ModTime.String(), ModifiedAt: fi.ModTime.UTC().Format(time.RFC3339Nano)}
}

func (a *API) listFiles(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	dir := r.URL.Query().Get("path")
	if dir == "" {
		dir = f.WorkDir()
	}
	list, err := f.List(r.Context(), dir)
	if err != nil {
		a.fileError(w, r, err)
		return
	}
	out := make([]FileInfo, 0, len(list))
	for _, fi := range list {
		out = append(out, a.fileInfoOf(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) fileInfo(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	fi, err := f.Stat(r.Context(), q[0])
	if err != nil {
		a.fileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.fileInfoOf(fi))
}

func (a *API) download(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	rc, fi, err := f.Open(r.Context(), q[0])
	if err != nil {
		a.fileError(w, r, err)
		return
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": fi.Name}))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
}

// uploadBody bounds an upload's body and gives it time to arrive.
func (a *API) uploadBody(w http.ResponseWriter, r *http.Request) (*multipart.Reader, bool) {
	if r.ContentLength > a.maxUpload() {
		WriteError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the upload is %d bytes; at most %d (config max_upload_bytes)", r.ContentLength, a.maxUpload()))
		return nil, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, a.maxUpload())
	mr, err := r.MultipartReader()
	if err != nil {
		badRequest(w, r, "an upload is a multipart/form-data body: "+err.Error())
		return nil, false
	}
	return mr, true
}

func (a *API) maxUpload() int64 {
	if a.opts.MaxUpload > 0 {
		return a.opts.MaxUpload
	}
	return fileops.DefaultMaxUpload
}

// uploadError answers a failed upload: too large, or the file's own
// error.
func (a *API) uploadError(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		WriteError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the upload is larger than %d bytes (config max_upload_bytes); nothing was written", a.maxUpload()))
		return
	}
	a.fileError(w, r, err)
}

// upload writes the form's "file" part to path, atomically: a reader
// sees the old file or the whole new one, and a cut upload leaves none.
func (a *API) upload(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	mr, ok := a.uploadBody(w, r)
	if !ok {
		return
	}
	for {
		part, err := mr.NextPart()
		if err != nil {
			if errors.Is(err, io.EOF) {
				badRequest(w, r, `the form has no "file" part`)
			} else {
				a.uploadError(w, r, err)
			}
			return
		}
		if part.FormName() != "file" {
			continue
		}
		// As Daytona does, missing parent directories are made (and
		// removed again if the upload fails).
		batch := fileops.NewBatch(f)
		batch.Parents = true
		defer batch.Abort(r.Context())
		if err := batch.Stage(r.Context(), q[0], part, 0o644); err != nil {
			a.uploadError(w, r, err)
			return
		}
		if err := batch.Commit(r.Context()); err != nil {
			a.fileError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{}) // Daytona's gin.H: an object of objects
		return
	}
}

// bulkUpload takes Daytona's SDK form: files[i].path then files[i].file,
// at most MaxBulkFiles of each, every part counted against
// max_upload_bytes. It writes all the files or none (fileops.Batch): each
// is staged as its part is read, and they are moved into place only once
// the whole form has arrived and every one was written; a refusal or a
// cut form removes what was staged.
func (a *API) bulkUpload(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	mr, ok := a.uploadBody(w, r)
	if !ok {
		return
	}
	batch := fileops.NewBatch(f)
	batch.Parents = true           // as Daytona does
	defer batch.Abort(r.Context()) // what is still staged: nothing after a commit
	paths := map[string]string{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			a.uploadError(w, r, err)
			return
		}
		name := part.FormName()
		idx, field, ok := strings.Cut(strings.TrimPrefix(name, "files["), "].")
		if !strings.HasPrefix(name, "files[") || !ok {
			badRequest(w, r, fmt.Sprintf("form field %q: want files[N].path and files[N].file", clip(name)))
			return
		}
		switch field {
		case "path":
			if _, dup := paths[idx]; dup {
				badRequest(w, r, fmt.Sprintf("files[%s].path comes twice", clip(idx)))
				return
			}
			if len(paths) >= MaxBulkFiles {
				badRequest(w, r, fmt.Sprintf("at most %d files in one bulk upload; nothing was written", MaxBulkFiles))
				return
			}
			b, err := io.ReadAll(io.LimitReader(part, maxPathField+1))
			if err != nil {
				a.uploadError(w, r, err)
				return
			}
			if len(b) == 0 || len(b) > maxPathField {
				badRequest(w, r, fmt.Sprintf("files[%s].path must be 1 to %d bytes; nothing was written", clip(idx), maxPathField))
				return
			}
			paths[idx] = string(b)
		case "file":
			p, ok := paths[idx]
			if !ok {
				badRequest(w, r, fmt.Sprintf("files[%s].file comes before its files[%s].path", clip(idx), clip(idx)))
				return
			}
			if p == "" {
				badRequest(w, r, fmt.Sprintf("files[%s].file comes twice", clip(idx)))
				return
			}
			paths[idx] = "" // one file per path
			if err := batch.Stage(r.Context(), p, part, 0o644); err != nil {
				a.uploadError(w, r, err)
				return
			}
		default:
			badRequest(w, r, fmt.Sprintf("form field %q: want files[N].path and files[N].file", clip(name)))
			return
		}
	}
	if err := batch.Commit(r.Context()); err != nil {
		a.fileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// maxPathField bounds a bulk upload's path field.
const maxPathField = 4096

// clip is at most 64 bytes of a caller's text, for an error message.
func clip(s string) string { return supervisor.Clip(s, 64) }

// bulkDownload answers a multipart body: a "file" part per file found,
// an "error" part (JSON) per one that could not be read.
func (a *API) bulkDownload(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Paths []string `json:"paths"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if len(b.Paths) == 0 || len(b.Paths) > MaxBulkFiles {
		badRequest(w, r, fmt.Sprintf("paths must name 1 to %d files", MaxBulkFiles))
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.WriteHeader(http.StatusOK)
	for _, p := range b.Paths {
		rc, fi, err := f.Open(r.Context(), p)
		if err != nil {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "error", "filename": p}))
			h.Set("Content-Type", "application/json")
			pw, _ := mw.CreatePart(h)
			json.NewEncoder(pw).Encode(map[string]any{"path": p, "message": err.Error()})
			continue
		}
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": p}))
		h.Set("Content-Type", "application/octet-stream")
		// The SDKs read each part's length for their progress; the part
		// holds exactly that many bytes, the file as it was opened.
		h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
		pw, _ := mw.CreatePart(h)
		_, err = io.CopyN(pw, rc, fi.Size)
		rc.Close()
		if err != nil {
			return // the client went away, or the file shrank: the answer ends short
		}
	}
	mw.Close()
}

func (a *API) deleteFile(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	recursive, ok := boolQuery(w, r, "recursive")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	if err := f.Remove(r.Context(), q[0], recursive); err != nil {
		a.fileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) createFolder(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	mode := fs.FileMode(0o755)
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := fileops.ParseMode(v)
		if err != nil {
			badRequest(w, r, err.Error())
			return
		}
		mode = m
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	if err := f.Mkdir(r.Context(), q[0], mode); err != nil {
		a.fileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (a *API) moveFile(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "source", "destination")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	if err := f.Rename(r.Context(), q[0], q[1]); err != nil {
		a.fileError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// setPermissions sets the mode; an owner or a group other than the
// daemon's user is refused (the daemon changes no file's owner).
func (a *API) setPermissions(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path")
	if !ok {
		return
	}
	query := r.URL.Query()
	for _, k := range []string{"owner", "group"} {
		if v := query.Get(k); v != "" && v != a.opts.User {
			badRequest(w, r, k+": not supported by this daemon (files here belong to the user it runs as, "+a.opts.User+")")
			return
		}
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	if v := query.Get("mode"); v != "" {
		m, err := fileops.ParseMode(v)
		if err != nil {
			badRequest(w, r, err.Error())
			return
		}
		if err := f.Chmod(r.Context(), q[0], m); err != nil {
			a.fileError(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// Match is Daytona's.
type Match struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Content string `json:"content"`
}

// findInFiles answers the lines holding pattern (text, not a regular
// expression), file by file, as a JSON array written as they are found:
// no answer is held whole (fileops bounds the find).
func (a *API) findInFiles(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path", "pattern")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	arr := newJSONArray(w)
	err := fileops.Find(r.Context(), f, q[0], q[1], func(m fileops.Match) error {
		return arr.add(Match{File: m.File, Line: m.Line, Content: m.Content})
	})
	if !arr.started && err != nil {
		a.fileError(w, r, err)
		return
	}
	arr.close()
}

// searchFiles answers the files whose name matches the glob.
func (a *API) searchFiles(w http.ResponseWriter, r *http.Request) {
	q, ok := required(w, r, "path", "pattern")
	if !ok {
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	files := []string{}
	if err := fileops.Search(r.Context(), f, q[0], q[1], func(name string) error { files = append(files, name); return nil }); err != nil {
		a.fileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]string{"files": files})
}

// jsonArray writes a JSON array element by element: the status and the
// opening bracket with the first, so that an error before any element
// can still be answered as one.
type jsonArray struct {
	w       http.ResponseWriter
	enc     *json.Encoder
	started bool
}

func newJSONArray(w http.ResponseWriter) *jsonArray {
	return &jsonArray{w: w, enc: json.NewEncoder(w)}
}

func (j *jsonArray) begin() {
	if !j.started {
		j.started = true
		j.w.Header().Set("Content-Type", "application/json")
		j.w.Header().Set("Cache-Control", "no-store")
		j.w.WriteHeader(http.StatusOK)
		io.WriteString(j.w, "[")
		return
	}
	io.WriteString(j.w, ",")
}

func (j *jsonArray) add(v any) error {
	j.begin()
	return j.enc.Encode(v)
}

func (j *jsonArray) close() {
	if !j.started {
		j.begin()
	}
	io.WriteString(j.w, "]\n")
}

// ReplaceResult is Daytona's.
type ReplaceResult struct {
	File    string `json:"file"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
}

// replaceInFiles replaces text in each file named, as a stream; a result
// that would pass max_upload_bytes is refused for that file before
// anything is written.
func (a *API) replaceInFiles(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Files    []string `json:"files"`
		Pattern  string   `json:"pattern"`
		NewValue string   `json:"newValue"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.Pattern == "" || len(b.Pattern) > fileops.MaxPattern || len(b.Files) == 0 || len(b.Files) > MaxBulkFiles {
		badRequest(w, r, fmt.Sprintf("a pattern of 1 to %d bytes and 1 to %d files are required", fileops.MaxPattern, MaxBulkFiles))
		return
	}
	f, ok := a.files(w, r)
	if !ok {
		return
	}
	out := make([]ReplaceResult, 0, len(b.Files))
	changed := false
	for _, name := range b.Files {
		n, err := fileops.Replace(r.Context(), f, name, b.Pattern, b.NewValue, a.maxUpload())
		res := ReplaceResult{File: name, Success: err == nil}
		if err != nil {
			res.Error = err.Error()
		}
		changed = changed || n > 0
		out = append(out, res)
	}
	writeJSON(w, http.StatusOK, out)
}
