//go:build unix

package execplugin

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kplug/kplug/internal/testkit/exectest"
)

func TestMain(m *testing.M) {
	behaviours := map[string]func() int{}
	for _, mode := range []string{"print", "env", "stdin", "pgrp", "exit", "signal", "hang", "grandchild", "answer-and-stay", "flood", "stderr"} {
		behaviours[mode] = func() int { return helper(mode, os.Args[1:]) }
	}
	exectest.Main(behaviours)
	goleak.VerifyTestMain(m)
}

// fakePlugin returns a command that runs the fake plugin (internal/testkit/exectest) in mode,
// which handles stdin itself.
func fakePlugin(t *testing.T, mode string, args ...string) Command {
	p := exectest.New(t).Behaviour(mode).NoStdin()
	return Command{Path: p.Path(), Args: args, Env: p.Env()}
}

// helper is the runner's own plugin bodies, exectest behaviours: real processes that
// misbehave in the ways the runner must handle.
func helper(mode string, args []string) int {
	switch mode {
	case "print": // print the arguments, one per line
		for _, a := range args {
			fmt.Println(a)
		}
		return 0
	case "env": // for each named variable: how often it occurs and its value
		for _, name := range args {
			n := 0
			for _, kv := range os.Environ() {
				if strings.HasPrefix(kv, name+"=") {
					n++
				}
			}
			fmt.Printf("%s %d %s\n", name, n, os.Getenv(name))
		}
		return 0
	case "stdin": // describe stdin, then echo it
		fmt.Printf("null=%v pgrp-same=%v\n", isNull(os.Stdin), samePgrpAsParent())
		_, _ = io.Copy(os.Stdout, os.Stdin)
		return 0
	case "pgrp": // print whether we lead our own process group
		fmt.Printf("own-group=%v\n", syscall.Getpgrp() == os.Getpid())
		return 0
	case "exit": // args: code, stderr text
		fmt.Print("partial credentials")
		fmt.Fprint(os.Stderr, args[1])
		code, _ := strconv.Atoi(args[0])
		return code
	case "signal": // die by SIGKILL
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 0
	case "hang": // args: pid file [ignore-term]
		if len(args) > 1 && args[1] == "ignore-term" {
			signal.Ignore(syscall.SIGTERM)
		}
		writePID(args[0])
		fmt.Fprintln(os.Stderr, "waiting for the browser login...")
		time.Sleep(time.Hour)
		return 0
	case "grandchild": // args: pid file, then "exit" or "hang"; the grandchild keeps our stdout
		gc := exec.Command(os.Args[0], args[0], "ignore-term")
		dir, err := hangingFake()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 9
		}
		gc.Env = append(os.Environ(), exectest.Env+"="+dir)
		gc.Stdout = os.Stdout
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 9
		}
		fmt.Println(`{"status":{}}`)
		if args[1] == "hang" {
			time.Sleep(time.Hour)
		}
		return 0
	case "answer-and-stay": // args: pid file; print an answer, close stdout and stderr, keep running
		writePID(args[0])
		fmt.Println(`{"status":{"proxyConfig":{}}}`)
		_ = os.Stdout.Close()
		_ = os.Stderr.Close()
		time.Sleep(time.Hour)
		return 0
	case "flood": // write args[0] bytes to stdout, then exit or, with args[1] == "hang", hang
		n, _ := strconv.Atoi(args[0])
		buf := make([]byte, 64<<10)
		for n > 0 {
			k := min(n, len(buf))
			if _, err := os.Stdout.Write(buf[:k]); err != nil {
				return 3
			}
			n -= k
		}
		if len(args) > 1 && args[1] == "hang" {
			time.Sleep(time.Hour) // only the cap may end this run
		}
		return 0
	case "stderr": // write args[0] bytes of numbered stderr lines, then fail
		n, _ := strconv.Atoi(args[0])
		for i := 0; n > 0; i++ {
			line := fmt.Sprintf("line %06d\n", i)
			fmt.Fprint(os.Stderr, line)
			n -= len(line)
		}
		return 1
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 99
}

// hangingFake makes, beside this fake's directory, one for a fake in mode hang.
func hangingFake() (string, error) {
	dir := filepath.Join(os.Getenv(exectest.Env), "grandchild")
	if err := os.MkdirAll(filepath.Join(dir, "calls"), 0o700); err != nil {
		return "", err
	}
	for name, content := range map[string]string{"behaviour": "hang", "no-stdin": "1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func isNull(f *os.File) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(os.DevNull)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

func samePgrpAsParent() bool {
	parent, err := syscall.Getpgid(os.Getppid())
	return err == nil && parent == syscall.Getpgrp()
}

func writePID(path string) {
	if err := os.WriteFile(path+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600); err == nil {
		_ = os.Rename(path+".tmp", path)
	}
}
