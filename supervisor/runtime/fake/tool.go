package fake

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Tool runs one of the few commands the conformance suite execs in a
// sandbox: the stub agent's binary runs it as "stub-exec OP ARGS…" in a
// native or docker sandbox (a scratch image has no shell), and the fake
// runtime runs it in memory, so every runtime is judged by the same
// commands. env and dir are the command's environment and working
// directory; a sleep ends early when stop is closed. It returns the exit
// code.
//
//	exit N        exit with code N
//	env NAME      print NAME's value
//	pwd           print the working directory
//	cat           copy stdin to stdout
//	err TEXT      print TEXT to stderr
//	sleep SECS    sleep, then exit 0
//	term          on a terminal, answer each line read: "size" with
//	              "size ROWS COLS", "tty" with the terminal's name,
//	              "exit N" by exiting with N
func Tool(args []string, env []string, dir string, stdin io.Reader, stdout, stderr io.Writer, stop <-chan struct{}) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "stub-exec: want an operation: exit, env, pwd, cat, err, sleep")
		return 2
	}
	arg := ""
	if len(args) > 1 {
		arg = args[1]
	}
	switch args[0] {
	case "exit":
		n, _ := strconv.Atoi(arg)
		return n
	case "env":
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, arg+"="); ok {
				fmt.Fprintln(stdout, v)
			}
		}
		return 0
	case "pwd":
		fmt.Fprintln(stdout, dir)
		return 0
	case "cat":
		if _, err := io.Copy(stdout, stdin); err != nil {
			return 1
		}
		return 0
	case "err":
		fmt.Fprintln(stderr, arg)
		return 0
	case "sleep":
		s, _ := strconv.ParseFloat(arg, 64)
		select {
		case <-time.After(time.Duration(s * float64(time.Second))):
		case <-stop:
		}
		return 0
	case "term":
		return term(stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "stub-exec: unknown operation %q\n", args[0])
	return 2
}

// term answers lines about the terminal that stdin is.
func term(stdin io.Reader, stdout, stderr io.Writer) int {
	f, ok := stdin.(*os.File)
	if !ok {
		fmt.Fprintln(stderr, "stub-exec: term: stdin is no terminal")
		return 2
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		switch line := strings.TrimSpace(sc.Text()); {
		case line == "size":
			ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
			if err != nil {
				fmt.Fprintln(stderr, "stub-exec: term:", err)
				return 1
			}
			fmt.Fprintf(stdout, "size %d %d\n", ws.Row, ws.Col)
		case line == "tty":
			name, _ := os.Readlink("/proc/self/fd/0")
			fmt.Fprintln(stdout, "tty", name)
		case strings.HasPrefix(line, "exit "):
			n, _ := strconv.Atoi(strings.TrimPrefix(line, "exit "))
			return n
		}
	}
	return 0
}

// RunTool is Tool for the process itself (the stub binary's stub-exec).
func RunTool(args []string) int {
	dir, _ := os.Getwd()
	return Tool(args, os.Environ(), dir, os.Stdin, os.Stdout, os.Stderr, nil)
}
