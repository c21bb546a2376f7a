package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// cpCommand copies files and directories into or out of a sandbox,
// running or stopped, as docker cp does: modes kept, a directory with
// everything beneath it, "-" a tar stream on stdin or stdout.
func cpCommand() command {
	return command{
		name: "cp", args: "NAME:PATH LOCAL | LOCAL NAME:PATH", minArgs: 2, maxArgs: 2, client: true,
		summary: "copy files or directories out of a sandbox or into one, running or stopped (- is a tar stream on stdin or stdout)",
		exec: func(ctx context.Context, c *cli, args []string) error {
			src, dst := args[0], args[1]
			sname, spath, fromSandbox := client.SplitSandboxPath(src)
			dname, dpath, toSandbox := client.SplitSandboxPath(dst)
			switch {
			case fromSandbox && toSandbox:
				return usagef("cp", "one side is a sandbox (NAME:PATH), the other a local path")
			case fromSandbox:
				return c.copyOut(ctx, sname, orWorkspace(spath), dst)
			case toSandbox:
				return c.copyIn(ctx, src, dname, orWorkspace(dpath))
			}
			return usagef("cp", "name the sandbox side as NAME:PATH")
		},
	}
}

// orWorkspace is "NAME:" as the sandbox's workspace.
func orWorkspace(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// copyOut copies name:src to dst ("-": the tar itself, to stdout).
func (c *cli) copyOut(ctx context.Context, name, src, dst string) error {
	cl := c.client()
	if dst == "-" {
		if c.json {
			return usagef("cp", "--json and - both write to stdout: the tar goes there")
		}
		return cl.GetArchive(ctx, name, src, c.stdout)
	}
	entry, err := cl.Stat(ctx, name, src)
	if err != nil {
		return err
	}
	// As docker: into dst when it is a directory, else as dst.
	dir, as := dst, path.Base(src)
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
	case err == nil && entry.IsDir:
		return fmt.Errorf("cannot copy directory %s:%s onto file %s", name, src, dst)
	case err == nil || errors.Is(err, fs.ErrNotExist) && !strings.HasSuffix(dst, "/"):
		dir, as = filepath.Dir(dst), filepath.Base(dst)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(cl.GetArchive(ctx, name, src, pw)) }()
	got, err := untarLocal(pr, dir, path.Base(src), as)
	pr.CloseWithError(err)
	if err != nil {
		return err
	}
	c.sayCopied(name+":"+src, filepath.Join(dir, as), got)
	return nil
}

// copyIn copies src ("-": a tar on stdin) to name:dst.
func (c *cli) copyIn(ctx context.Context, src, name, dst string) error {
	cl := c.client()
	if src == "-" {
		got, err := cl.PutArchive(ctx, name, dst, c.stdin)
		if err == nil {
			c.sayCopied("-", name+":"+dst, got)
		}
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	// As docker: into dst when it is a directory, else as dst (its
	// directory made when missing; "newdir/" is one to make).
	dir, as := dst, filepath.Base(src)
	entry, err := cl.Stat(ctx, name, dst)
	switch {
	case err == nil && entry.IsDir:
	case err == nil && fi.IsDir():
		return fmt.Errorf("cannot copy directory %s onto file %s:%s", src, name, dst)
	case err == nil || client.IsCode(err, wire.CodeNotFound) && !strings.HasSuffix(dst, "/"):
		dir, as = path.Dir(dst), path.Base(dst)
	case !client.IsCode(err, wire.CodeNotFound):
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarLocal(src, as, pw)) }()
	got, err := cl.PutArchive(ctx, name, dir, pr)
	pr.CloseWithError(err)
	if err == nil {
		c.sayCopied(src, name+":"+path.Join(dir, as), got)
	}
	return err
}

// sayCopied says what a copy made: on stderr, or with --json as one
// object on stdout ({"source", "destination", "files", "dirs",
// "links", "bytes", "skipped"}).
func (c *cli) sayCopied(src, dst string, got wire.Extracted) {
	if c.json {
		c.printJSON(struct {
			Source      string `json:"source"`
			Destination string `json:"destination"`
			wire.Extracted
		}{src, dst, got})
		return
	}
	fmt.Fprintf(c.stderr, "Copied %s to %s (%s)\n", inert(src), inert(dst), copied(got))
	if n := len(got.Skipped); n > 0 {
		fmt.Fprintf(c.stderr, "warning: %s not copied (a hard link, a device or a FIFO): %s\n",
			plural(int64(n), "entry"), inert(strings.Join(got.Skipped[:min(n, 5)], ", ")))
	}
}

// copied says what a copy made: "3 files, 1 directory, 2 KiB" (and
// links when there were some).
func copied(e wire.Extracted) string {
	s := plural(int64(e.Files), "file") + ", " + plural(int64(e.Dirs), "directory")
	if e.Links > 0 {
		s += ", " + plural(int64(e.Links), "link")
	}
	return s + ", " + bytesString(e.Bytes)
}

// tarLocal writes src (a file, or a directory with everything beneath
// it) to w as a tar whose entries are named from as on: modes and times
// kept, links as links.
func tarLocal(src, as string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // a socket or a device: not copied
		}
		rel, _ := filepath.Rel(src, p)
		hdr.Name = path.Join(as, filepath.ToSlash(rel))
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// untarLocal extracts r beneath dir, renaming its top entry from to as;
// nothing is written outside dir (os.Root), links are made as links.
func untarLocal(r io.Reader, dir, from, as string) (wire.Extracted, error) {
	var got wire.Extracted
	root, err := os.OpenRoot(dir)
	if err != nil {
		return got, err
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var modes []dirMode // set once their content is in: a read-only one still takes it
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			for i := len(modes) - 1; i >= 0; i-- {
				if err := root.Chmod(modes[i].name, modes[i].mode); err != nil {
					return got, err
				}
			}
			return got, nil
		}
		if err != nil {
			return got, err
		}
		rest, ok := strings.CutPrefix(strings.TrimSuffix(hdr.Name, "/"), from)
		if !ok || rest != "" && rest[0] != '/' {
			return got, fmt.Errorf("the archive's entry %q is not beneath %s", hdr.Name, from)
		}
		name, mode := as+rest, fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			got.Dirs++
			modes = append(modes, dirMode{name, mode})
			err = root.MkdirAll(name, 0o755)
		case tar.TypeReg:
			got.Files++
			got.Bytes += hdr.Size
			err = writeLocal(root, name, tr, mode)
		case tar.TypeSymlink:
			got.Links++
			root.Remove(name)
			err = root.Symlink(hdr.Linkname, name)
		default:
			got.Skipped = append(got.Skipped, hdr.Name)
		}
		if err != nil {
			return got, err
		}
	}
}

// writeLocal replaces file name of root with r's bytes, mode kept.
func writeLocal(root *os.Root, name string, r io.Reader, mode fs.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(name, mode)
	}
	return err
}
