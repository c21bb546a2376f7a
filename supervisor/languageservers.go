package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/supervisor/lsp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of language servers: per sandbox and in all; and the largest
// document opened in one.
const (
	MaxLanguageServersPerSandbox = 4
	MaxLanguageServers           = 16
	MaxLSPDocument               = 8 << 20
)

// StartLanguageServer starts the server for language in running sandbox
// id, for project (a directory as the sandbox sees it); one already
// running for the two is kept. A language without a server, or a server
// the sandbox does not have, is ErrInvalid naming it. It counts as
// activity.
func (s *Supervisor) StartLanguageServer(ctx context.Context, id, language, project string) error {
	argv, ok := lsp.Servers[language]
	if !ok {
		return invalid("no language server for %q here (%s)", Clip(language, MaxQuoted), strings.Join(slices.Sorted(maps.Keys(lsp.Servers)), ", "))
	}
	if !path.IsAbs(project) {
		return invalid("pathToProject %q must be an absolute path as the sandbox sees it", Clip(project, MaxQuoted))
	}
	_, h, err := s.liveHandle(id)
	if err != nil {
		return err
	}
	if _, err := s.LanguageServer(id, language, project); err == nil {
		return nil
	}
	s.lsps.mu.Lock()
	list := s.lsps.liveLocked(id, h)
	switch {
	case len(list) >= MaxLanguageServersPerSandbox:
		s.lsps.mu.Unlock()
		return fmt.Errorf("%w: %s runs %d language servers (at most %d); stop one first", ErrBusy, Clip(id, MaxQuoted), len(list), MaxLanguageServersPerSandbox)
	case s.lsps.count >= MaxLanguageServers:
		s.lsps.mu.Unlock()
		return fmt.Errorf("%w: %d language servers run (at most %d in all)", ErrBusy, s.lsps.count, MaxLanguageServers)
	}
	s.lsps.count++ // the place is taken while the server starts
	s.lsps.mu.Unlock()
	srv, err := lsp.New(ctx, language, project, func(stdin io.Reader, stdout io.Writer) (runtime.Process, error) {
		return s.Exec(context.Background(), id, runtime.ExecSpec{Argv: argv, Dir: project, Stdin: stdin, Stdout: stdout})
	})
	s.lsps.mu.Lock()
	defer s.lsps.mu.Unlock()
	if err != nil {
		s.lsps.count--
		if errors.Is(err, runtime.ErrProgramNotFound) {
			return invalid("the %s language server (%s) is not installed in the sandbox", language, argv[0])
		}
		return err
	}
	s.lsps.count-- // the place taken is the server's now
	s.lsps.addLocked(id, srv, h)
	_ = s.RefreshActivity(id)
	return nil
}

// LanguageServer finds the running server for language and project in
// sandbox id (ErrNotFound: start it first).
func (s *Supervisor) LanguageServer(id, language, project string) (*lsp.Server, error) {
	_, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	s.lsps.mu.Lock()
	defer s.lsps.mu.Unlock()
	for _, srv := range s.lsps.liveLocked(id, h) {
		if srv.Language == language && srv.Project == project {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("%w: no %s language server runs for %s in %s; start one first", ErrNotFound, Clip(language, MaxQuoted), Clip(project, MaxQuoted), Clip(id, MaxQuoted))
}

// StopLanguageServer stops the server for language and project.
func (s *Supervisor) StopLanguageServer(id, language, project string) error {
	srv, err := s.LanguageServer(id, language, project)
	if err != nil {
		return err
	}
	srv.Stop()
	s.lsps.mu.Lock()
	s.lsps.removeLocked(id, srv)
	s.lsps.mu.Unlock()
	_ = s.RefreshActivity(id)
	return nil
}

// OpenDocument tells the server for language and project that the file
// at uri (file://PATH, as the sandbox sees it) is open, with its content
// read from the sandbox's files.
func (s *Supervisor) OpenDocument(ctx context.Context, id, language, project, uri string) error {
	srv, err := s.LanguageServer(id, language, project)
	if err != nil {
		return err
	}
	name, ok := strings.CutPrefix(uri, "file://")
	if !ok {
		return invalid("uri %q must be file://PATH", Clip(uri, MaxQuoted))
	}
	f, err := s.Files(id)
	if err != nil {
		return err
	}
	r, info, err := f.Open(ctx, name)
	if err != nil {
		return err
	}
	defer r.Close()
	if info.Size > MaxLSPDocument {
		return invalid("%s is %d bytes; a language server is given at most %d", Clip(name, MaxQuoted), info.Size, MaxLSPDocument)
	}
	text, err := io.ReadAll(io.LimitReader(r, MaxLSPDocument))
	if err != nil {
		return err
	}
	return srv.Open(uri, string(text))
}

// ended reports whether a language server has ended by itself.
func ended(s *lsp.Server) bool {
	select {
	case <-s.Ended():
		return true
	default:
		return false
	}
}
