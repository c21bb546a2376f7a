package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor/fileops"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// A sandbox's files as tar streams, as docker's
// /containers/{id}/archive: what cp copies, files and directories alike,
// modes kept, running or stopped.

// storedFiles is sandboxFiles with the path required.
func (s *Server) storedFiles(w http.ResponseWriter, r *http.Request) (runtime.Files, string, bool) {
	if r.URL.Query().Get("path") == "" {
		writeError(w, wire.CodeInvalidRequest, "path is required")
		return nil, "", false
	}
	return s.sandboxFiles(w, r)
}

// statFile describes what is at path, running or stopped: a link is
// described, not followed.
func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	f, p, ok := s.storedFiles(w, r)
	if !ok {
		return
	}
	fi, err := f.Stat(r.Context(), p)
	if err != nil {
		s.fileError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toFileEntry(fi))
}

// getArchive streams path, a file or a directory with everything beneath
// it, as a tar. An error once the stream has begun cuts it short: the
// reader's tar ends unexpectedly.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request) {
	f, p, ok := s.storedFiles(w, r)
	if !ok {
		return
	}
	if _, err := f.Stat(r.Context(), p); err != nil {
		s.fileError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := fileops.Tar(r.Context(), f, p, w); err != nil && r.Context().Err() == nil {
		s.log.Warn("archive cut short", "sandbox", r.PathValue("id"), "err", err)
		panic(http.ErrAbortHandler) // the client must not take a cut tar for a whole one
	}
}

// putArchive extracts the tar body beneath path, a directory (made with
// its parents when missing), and says what it made.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request) {
	f, p, ok := s.storedFiles(w, r)
	if !ok {
		return
	}
	max := s.maxUpload()
	// The content is bounded by Untar; the body also holds a header of
	// 512 bytes or more per entry.
	body := http.MaxBytesReader(w, r.Body, max+fileops.MaxArchiveEntries*2048)
	out, err := fileops.Untar(r.Context(), f, p, body, max)
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, runtime.ErrOutside):
		writeError(w, wire.CodePathOutside, err.Error()+"; what it had added was removed")
	case errors.Is(err, fileops.ErrTooLarge):
		writeError(w, wire.CodeTooLarge, err.Error()+"; what it had added was removed")
	case errors.Is(err, fileops.ErrArchive):
		writeError(w, wire.CodeInvalidRequest, err.Error()+"; what it had added was removed")
	case errors.As(err, &mbe):
		writeError(w, wire.CodeTooLarge, "the archive is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes; what it had added was removed")
	case err != nil:
		s.fileError(w, err)
	default:
		writeJSON(w, http.StatusOK, wire.Extracted(out))
	}
}
