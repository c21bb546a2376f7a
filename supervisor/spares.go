package supervisor

import (
	"fmt"
	"sync"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"golang.org/x/sys/unix"
)

// spareDirs is how many staging directories are kept made ahead.
const spareDirs = 4

// spares are staging directories made ahead of the creates that take
// them: each is what every create starts from (see rootFS.stage), so that
// a create spends no inode allocation before its spawn, only writes and
// a rename. On ext4 here each mkdir or file creation costs 50 to 130 µs,
// five of them a create. Spares are refilled once the sandbox that took
// one is no longer starting (refill), so that the refill never competes
// with a child's start; a create that finds none makes its directory
// itself, as every create of a burst beyond the first four does. A spare
// is an ordinary staging directory: a daemon that dies leaves it to the
// next start, which removes it like any interrupted create's.
type spares struct {
	mu      sync.Mutex
	ready   []string
	filling bool
}

// takeSpare returns a staging directory: a spare, or one made now.
func (s *Supervisor) takeSpare() (string, error) {
	p := &s.spares
	p.mu.Lock()
	if n := len(p.ready); n > 0 {
		name := p.ready[n-1]
		p.ready = p.ready[:n-1]
		p.mu.Unlock()
		return name, nil
	}
	p.mu.Unlock()
	return s.fs.stage()
}

// fillSpares makes spares until there are spareDirs of them. A failure
// is logged and ends the fill; the next one tries again. New runs it
// before the daemon serves (four directories, about a millisecond), so
// that a started daemon has no work of its own under way.
func (s *Supervisor) fillSpares() {
	p := &s.spares
	for {
		p.mu.Lock()
		if len(p.ready) >= spareDirs || s.lifetime.Err() != nil {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		name, err := s.fs.stage()
		if err != nil {
			s.log.Warn("make a spare sandbox directory", "err", err)
			return
		}
		p.mu.Lock()
		p.ready = append(p.ready, name)
		p.mu.Unlock()
	}
}

// refillSpares runs fillSpares in the background, unless that is under
// way.
func (s *Supervisor) refillSpares() {
	p := &s.spares
	p.mu.Lock()
	if p.filling || len(p.ready) >= spareDirs {
		p.mu.Unlock()
		return
	}
	p.filling = true
	p.mu.Unlock()
	if !s.track() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
		return
	}
	go func() {
		defer s.bg.Done()
		s.fillSpares()
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
}

// removeSpares removes the spares left when the supervisor closes (after
// every refill has ended).
func (s *Supervisor) removeSpares() {
	p := &s.spares
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.ready {
		if err := s.fs.removeAll(name); err != nil {
			s.log.Error("remove a spare sandbox directory", "dir", name, "err", err)
		}
	}
	p.ready = nil
}

// stagedFiles are the files of a sandbox directory that a create writes
// or its workload appends to, made empty in a staging directory (0600).
var stagedFiles = []string{EnvFile, RecordFile, logcap.Stdout, logcap.Stderr}

// stage makes a staging directory (see tempName) with an empty workspace
// and empty stagedFiles. On error nothing of it remains.
func (r *rootFS) stage() (string, error) {
	name := r.tempName(kindNew)
	if err := r.mkdir(name); err != nil {
		return "", err
	}
	err := r.mkdir(name + "/" + WorkspaceDir)
	for _, f := range stagedFiles {
		if err == nil {
			err = r.createFile(name+"/"+f, nil)
		}
	}
	if err != nil {
		if rerr := r.removeAll(name); rerr != nil {
			err = fmt.Errorf("%w (and its removal: %v)", err, rerr)
		}
		return "", err
	}
	return name, nil
}

// fill writes data into rel, an empty regular file that stage made.
func (r *rootFS) fill(rel string, data []byte) error {
	f, fi, err := r.OpenRegular(rel, unix.O_WRONLY)
	if err != nil {
		return err
	}
	if fi.Size() != 0 {
		f.Close()
		return fmt.Errorf("%s: a staged file is not empty", rel)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
