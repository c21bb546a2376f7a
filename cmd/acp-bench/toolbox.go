package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// benchToolbox measures the toolbox against its floors, interleaved run
// by run: an exec round trip (`true` through POST …/exec) against a
// plain fork/exec of `true` from this process, Daytona's execute of
// `true` (the sandbox's shell reading it) against that shell spawned
// here, and a file's upload and
// download (PUT and GET …/files/content) against the same bytes copied
// to a synced file here (an upload is written atomically and synced) and
// read from one (a download reads the file).
//
// Where the machine isolates, the isolated daemon's exec round trip is
// measured in the same runs.
func benchToolbox(c config, b *bench, r *results) error {
	d := b.on
	for _, x := range []*daemon{b.on, b.iso} {
		if x == nil {
			continue
		}
		if _, err := x.create("tb", nil); err != nil {
			return err
		}
		defer x.delete("tb")
		if err := waitFor(30*time.Second, func() bool {
			var sb sandbox
			return getJSON(x.url("/v1/sandboxes/tb"), &sb) == nil && sb.State == "started"
		}); err != nil {
			return fmt.Errorf("the sandbox did not start: %w", err)
		}
	}
	if err := benchExecs(c, b, r); err != nil {
		return err
	}

	const size = 64 << 20
	blob := make([]byte, size)
	rand.Read(blob)
	dir, err := os.MkdirTemp("", "acp-bench-copy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, blob, 0o644); err != nil {
		return err
	}
	var copyT, readT, up, down []time.Duration
	for range max(3, c.runs/8) {
		t0 := time.Now()
		if err := copyFile(src, filepath.Join(dir, "dst")); err != nil {
			return err
		}
		copyT = append(copyT, time.Since(t0))
		t0 = time.Now()
		if f, err := os.Open(src); err == nil {
			io.Copy(io.Discard, f)
			f.Close()
		}
		readT = append(readT, time.Since(t0))
		t0 = time.Now()
		req, _ := http.NewRequest("PUT", d.url("/v1/sandboxes/tb/files/content?path=blob"), bytes.NewReader(blob))
		req.Header.Set("Content-Type", "application/octet-stream")
		if err := do(req, 204); err != nil {
			return err
		}
		up = append(up, time.Since(t0))
		t0 = time.Now()
		resp, err := httpc.Get(d.url("/v1/sandboxes/tb/files/content?path=blob"))
		if err != nil {
			return err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != size {
			return fmt.Errorf("download: %d bytes of %d", n, size)
		}
		down = append(down, time.Since(t0))
	}
	mibps := func(s stat) float64 { return float64(size>>20) / (s.Median / 1000) }
	r.Toolbox.SizeMiB = size >> 20
	r.Toolbox.CopyMiBps, r.Toolbox.ReadMiBps = mibps(summarize(copyT)), mibps(summarize(readT))
	r.Toolbox.UploadMiBps, r.Toolbox.DownloadMiBps = mibps(summarize(up)), mibps(summarize(down))
	return nil
}

// copyFile is the floor of an upload or download: the bytes read from one
// file and written, synced, to another.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func post(url, ctype string, body io.Reader, want int) error {
	req, _ := http.NewRequest("POST", url, body)
	req.Header.Set("Content-Type", ctype)
	return do(req, want)
}

func do(req *http.Request, want int) error {
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	return nil
}

// benchExecs measures the exec round trips against their floors, run by
// run: /v1's exec of `true` against a fork/exec of it here, Daytona's
// execute of `true` (the sandbox's shell reading it) against that shell
// spawned here.
func benchExecs(c config, b *bench, r *results) error {
	d := b.on
	truePath, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	var floor, through, isolated, shellFloor, execute []time.Duration
	for range c.runs {
		t0 := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			return err
		}
		floor = append(floor, time.Since(t0))
		t0 = time.Now()
		if err := post(d.url("/v1/sandboxes/tb/exec"), "application/json", strings.NewReader(`{"argv":["true"]}`), 200); err != nil {
			return err
		}
		through = append(through, time.Since(t0))
		if b.iso != nil {
			t0 = time.Now()
			if err := post(b.iso.url("/v1/sandboxes/tb/exec"), "application/json", strings.NewReader(`{"argv":["true"]}`), 200); err != nil {
				return err
			}
			isolated = append(isolated, time.Since(t0))
		}
		// Daytona's execute: the sandbox's shell reading the command,
		// against that same shell spawned here.
		t0 = time.Now()
		sh := exec.Command(supervisor.ShellArgv[0], supervisor.ShellArgv[1:]...)
		sh.Stdin = strings.NewReader("true\n")
		if err := sh.Run(); err != nil {
			return err
		}
		shellFloor = append(shellFloor, time.Since(t0))
		t0 = time.Now()
		if err := post(d.url("/api/toolbox/tb/process/execute"), "application/json", strings.NewReader(`{"command":"true"}`), 200); err != nil {
			return err
		}
		execute = append(execute, time.Since(t0))
	}
	r.Toolbox.ExecFloor, r.Toolbox.Exec, r.Toolbox.IsoExec = summarize(floor), summarize(through), summarize(isolated)
	r.Toolbox.ShellFloor, r.Toolbox.Execute = summarize(shellFloor), summarize(execute)
	return nil
}
