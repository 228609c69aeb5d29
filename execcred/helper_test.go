package execcred

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/term"
)

// The test binary re-executed with helperEnv set is a fake credential plugin, driven by:
//
//	FAKE_OUTPUT      what to print on stdout
//	FAKE_OUTPUT_FILE if set, print this file's contents instead (tests change it between runs)
//	FAKE_INFO_DIR    if set, write KUBERNETES_EXEC_INFO to <dir>/<n> for the n-th run
//	FAKE_COUNT_FILE  if set, append one byte per run (its size counts runs, even concurrent ones)
//	FAKE_STDERR      what to print on stderr
//	FAKE_EXIT        the exit code (a file "exit" beside FAKE_OUTPUT_FILE overrides it)
//	FAKE_SLEEP       how long to sleep first
const helperEnv = "KPLUG_EXECCRED_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(fakePlugin())
	}
	goleak.VerifyTestMain(m)
}

func fakePlugin() int {
	if d, err := time.ParseDuration(os.Getenv("FAKE_SLEEP")); err == nil {
		time.Sleep(d)
	}
	if f := os.Getenv("FAKE_COUNT_FILE"); f != "" {
		fh, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err == nil {
			_, err = fh.Write([]byte{'x'})
			_ = fh.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 96
		}
	}
	if dir := os.Getenv("FAKE_INFO_DIR"); dir != "" {
		entries, _ := os.ReadDir(dir)
		name := fmt.Sprintf("%s/%03d", dir, len(entries))
		if err := os.WriteFile(name, []byte(os.Getenv(InfoEnv)), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
	}
	out := os.Getenv("FAKE_OUTPUT")
	if f := os.Getenv("FAKE_OUTPUT_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 97
		}
		out = string(b)
	}
	if os.Getenv("FAKE_REPORT_TTY") != "" { // answer with a token saying whether stdin is a terminal
		out = fmt.Sprintf(`{"apiVersion":%q,"status":{"token":"tty=%v"}}`, V1, term.IsTerminal(int(os.Stdin.Fd())))
	}
	fmt.Print(out)
	fmt.Fprint(os.Stderr, os.Getenv("FAKE_STDERR"))
	code, _ := strconv.Atoi(os.Getenv("FAKE_EXIT"))
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Getenv("FAKE_OUTPUT_FILE")), "exit")); err == nil {
		code, _ = strconv.Atoi(string(b))
	}
	return code
}
