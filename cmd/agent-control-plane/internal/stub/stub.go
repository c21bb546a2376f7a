// Package stub is the bundled stub agent-server, the daemon's default
// child (agent-control-plane stub-agent), a minimal agent-server: it listens on $HOST:$PORT (HOST
// defaults to 127.0.0.1; in a container the daemon sets 0.0.0.0) and
// answers GET /api/info with its sandbox id. It behaves like the real
// agent-server at the points the daemon touches. Environment knobs, for
// tests and demos:
//
//	STUB_AGENT_READY_DELAY_MS   wait before listening
//	STUB_AGENT_IGNORE_SIGTERM=1 ignore SIGTERM (exercise the SIGKILL path)
//	STUB_AGENT_EXIT_AFTER_MS    exit with code 3 after this long
//	STUB_AGENT_GRANDCHILD=1     start a grandchild that shares stdout/stderr
//	STUB_AGENT_PRINT            a line printed to stdout at start
//	STUB_AGENT_SERVE_ENV=1      answer GET /api/env with its environment
//	STUB_AGENT_ALLOC_MB         once listening, allocate and touch this many
//	                            MiB, a MiB every millisecond (a memory hog)
//	STUB_AGENT_SPAM_BYTES       write this many bytes of numbered lines to
//	                            stdout and stderr at start, then a line
//	                            "stub-agent: last spam line" on each
//	STUB_AGENT_DIAL             host:port,… each tried once over TCP at
//	                            start, printing "stub-agent: dial ADDR: ok"
//	                            or "…: failed: why" (network isolation)
//	STUB_AGENT_TICK_MS          once listening, print "stub-agent: tick N"
//	                            this often, even N to stdout, odd to stderr
//	                            (two streams written in turn)
//	STUB_AGENT_EXTRA_PORT       also listen on $HOST:this port, answering
//	                            every path with "stub-agent: port N of
//	                            sandbox ID: PATH" (a second port to preview)
package stub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes of Run.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Run serves until SIGTERM or SIGINT and returns the exit code.
//
// It is long because each of the stub's knobs is a few lines at the
// point of its life it changes (before listening, at start, once
// serving).
func Run(stdout, stderr io.Writer) int {
	id := os.Getenv("AGENT_SANDBOX_ID")
	port, err := strconv.Atoi(os.Getenv("PORT"))
	if err != nil || port <= 0 {
		fmt.Fprintln(stderr, "stub-agent: PORT must be set to a port number")
		return exitUsage
	}
	if line := os.Getenv("STUB_AGENT_PRINT"); line != "" {
		fmt.Fprintln(stdout, line)
	}
	if n, _ := strconv.ParseInt(os.Getenv("STUB_AGENT_SPAM_BYTES"), 10, 64); n > 0 {
		for _, w := range []io.Writer{stdout, stderr} {
			spam(w, n)
		}
	}
	if addrs := os.Getenv("STUB_AGENT_DIAL"); addrs != "" {
		go dialAll(stdout, strings.Split(addrs, ","))
	}
	sigs := []os.Signal{os.Interrupt}
	if os.Getenv("STUB_AGENT_IGNORE_SIGTERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		sigs = append(sigs, syscall.SIGTERM)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	if os.Getenv("STUB_AGENT_GRANDCHILD") == "1" {
		gc := exec.Command("sleep", "3600")
		gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
		if err := gc.Start(); err != nil {
			fmt.Fprintln(stderr, "stub-agent: grandchild:", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "stub-agent: grandchild pid %d\n", gc.Process.Pid)
	}
	if ms, _ := strconv.Atoi(os.Getenv("STUB_AGENT_EXIT_AFTER_MS")); ms > 0 {
		time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { os.Exit(3) })
	}
	if ms, _ := strconv.Atoi(os.Getenv("STUB_AGENT_READY_DELAY_MS")); ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	host := os.Getenv("HOST")
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintln(stderr, "stub-agent:", err)
		return exitFailure
	}
	started := time.Now().UTC()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		json.NewEncoder(w).Encode(map[string]any{
			"name": "stub-agent", "sandboxId": id, "pid": os.Getpid(),
			"startedAt": started.Format(time.RFC3339Nano), "status": "ok",
		})
	})
	if os.Getenv("STUB_AGENT_SERVE_ENV") == "1" {
		mux.HandleFunc("GET /api/env", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(os.Environ())
		})
	}
	if mb, _ := strconv.Atoi(os.Getenv("STUB_AGENT_ALLOC_MB")); mb > 0 {
		go hog(mb)
	}
	if ms, _ := strconv.Atoi(os.Getenv("STUB_AGENT_TICK_MS")); ms > 0 {
		go func() {
			for n := 0; ; n++ {
				fmt.Fprintf([]io.Writer{stdout, stderr}[n%2], "stub-agent: tick %d\n", n)
				time.Sleep(time.Duration(ms) * time.Millisecond)
			}
		}()
	}
	if extra := os.Getenv("STUB_AGENT_EXTRA_PORT"); extra != "" {
		eln, err := net.Listen("tcp", net.JoinHostPort(host, extra))
		if err != nil {
			fmt.Fprintln(stderr, "stub-agent: extra port:", err)
			return exitFailure
		}
		go http.Serve(eln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "stub-agent: port %s of sandbox %s: %s", extra, id, r.URL.RequestURI())
		}))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "stub-agent: sandbox %s listening on http://%s\n", id, net.JoinHostPort(host, strconv.Itoa(port)))
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(stderr, "stub-agent:", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, "stub-agent: stopped")
	return exitOK
}

// spam writes n bytes of numbered lines to w, 64 KiB at a time, then a
// last line.
func spam(w io.Writer, n int64) {
	buf := make([]byte, 0, 64<<10)
	for i := 0; n > 0; {
		buf = buf[:0]
		for len(buf) < cap(buf)-100 && int64(len(buf)) < n {
			buf = fmt.Appendf(buf, "stub-agent: spam line %09d ..............................................\n", i)
			i++
		}
		buf = buf[:min(int64(len(buf)), n)]
		if _, err := w.Write(buf); err != nil {
			return
		}
		n -= int64(len(buf))
	}
	fmt.Fprintln(w, "stub-agent: last spam line")
}

// hogged keeps the hog's memory reachable.
var hogged [][]byte

// hog allocates and touches mb MiB, a MiB a millisecond.
func hog(mb int) {
	for range mb {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hogged = append(hogged, b)
		time.Sleep(time.Millisecond)
	}
}

// dialAll tries each address once and says what happened.
func dialAll(w io.Writer, addrs []string) {
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			fmt.Fprintf(w, "stub-agent: dial %s: failed: %v\n", a, err)
			continue
		}
		c.Close()
		fmt.Fprintf(w, "stub-agent: dial %s: ok\n", a)
	}
}
