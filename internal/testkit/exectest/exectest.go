// Package exectest is the one fake plugin of kplug's tests: the test binary re-executed as
// a plugin process, driven by files in a directory of its own, so that tests of exec
// credential plugins, exec proxies and image credential providers all use real processes
// the same way, and parallel tests never share a fake.
//
// In the package's TestMain, call Main first. A test makes a fake with New, sets what it
// does (Stdout, Stderr, Exit, Sleep, Hold, or a Behaviour of the calling package's own, which
// reads what it was given with Current), names it by Path and Env in the configuration under
// test, and reads back what it was given (Runs, Calls).
//
// Stdout is a text/template executed for each run with a Data, so that one fake can answer
// with what it was asked: `{"token":"run-{{.Run}}"}`, `{{index .Request "image"}}`.
package exectest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"golang.org/x/term"
)

// Env names the fake's directory in its environment; the test binary is a fake plugin when
// it is set.
const Env = "KPLUG_FAKE_PLUGIN"

// infoEnv is client-go's KUBERNETES_EXEC_INFO, recorded for exec credential plugins.
const infoEnv = "KUBERNETES_EXEC_INFO"

// Data is what the Stdout template sees.
type Data struct {
	Run     int            // 1 for the first run
	Args    []string       // the plugin's arguments
	Stdin   string         // what it read from stdin
	Request map[string]any // stdin parsed as JSON (an image credential request), or nil
	Info    map[string]any // KUBERNETES_EXEC_INFO parsed as JSON, or nil
	TTY     bool           // whether stdin is a terminal
}

// Call is what one run was given.
type Call struct {
	Args  []string `json:"args"`
	Stdin string   `json:"stdin"`
	Info  string   `json:"info"` // KUBERNETES_EXEC_INFO
	TTY   bool     `json:"tty"`
}

// Main makes this process the fake plugin, and exits, when Env is set. behaviours are
// plugin bodies of the calling package's own, chosen with Plugin.Behaviour (an exec proxy
// that serves, say); they run after the call is recorded.
func Main(behaviours map[string]func() int) {
	dir := os.Getenv(Env)
	if dir == "" {
		return
	}
	os.Exit(run(dir, behaviours))
}

func run(dir string, behaviours map[string]func() int) int {
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	stdin := []byte{}
	tty := term.IsTerminal(int(os.Stdin.Fd()))
	if !tty && read("no-stdin") == "" {
		stdin, _ = readAll(os.Stdin)
	}
	n, err := count(filepath.Join(dir, "runs"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "exectest:", err)
		return 99
	}
	call := Call{Args: os.Args[1:], Stdin: string(stdin), Info: os.Getenv(infoEnv), TTY: tty}
	if b, err := json.Marshal(call); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "calls", fmt.Sprintf("%06d.json", n)), b, 0o600)
	}
	if d, err := time.ParseDuration(read("sleep")); err == nil {
		time.Sleep(d)
	}
	if read("hold") != "" {
		for {
			if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if name := read("behaviour"); name != "" {
		b, ok := behaviours[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "exectest: no behaviour %q\n", name)
			return 98
		}
		current = call
		return b()
	}
	data := Data{Run: n, Args: call.Args, Stdin: call.Stdin, TTY: tty}
	_ = json.Unmarshal(stdin, &data.Request)
	_ = json.Unmarshal([]byte(call.Info), &data.Info)
	tmpl, err := template.New("stdout").Option("missingkey=zero").Parse(read("stdout"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "exectest: stdout template:", err)
		return 97
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, data); err != nil {
		fmt.Fprintln(os.Stderr, "exectest: stdout template:", err)
		return 97
	}
	_, _ = os.Stdout.Write(out.Bytes())
	fmt.Fprint(os.Stderr, read("stderr"))
	code, _ := strconv.Atoi(strings.TrimSpace(read("exit")))
	return code
}

// count appends a byte to name and returns its size: the run's number, also among
// concurrent runs, since appends are atomic.
func count(name string) (int, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Write([]byte{'x'}); err != nil {
		return 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return int(info.Size()), nil
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// current is the run's call, for a behaviour.
var current Call

// Current is what this run of the fake was given (its arguments and the stdin it read), for
// a behaviour (see Main) that acts on it: one that checks what a real plugin requires of
// its caller and fails as that plugin fails, say. A behaviour reads its environment with
// os.Getenv, as the real plugin would.
func Current() Call { return current }

// Plugin is one fake plugin: a directory of t's with what it does and what it was given.
type Plugin struct {
	Dir string
	t   testing.TB
}

// New makes a fake plugin that answers nothing on stdout and exits 0.
func New(t testing.TB) *Plugin {
	t.Helper()
	p := &Plugin{Dir: t.TempDir(), t: t}
	if err := os.Mkdir(filepath.Join(p.Dir, "calls"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// Path is the executable to configure: the test binary.
func (p *Plugin) Path() string {
	exe, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	return exe
}

// Env is the environment to give the plugin, as NAME=VALUE entries.
func (p *Plugin) Env() []string {
	// A race-enabled test binary otherwise sleeps a second on exit before reporting races.
	return []string{Env + "=" + p.Dir, "GORACE=atexit_sleep_ms=0"}
}

func (p *Plugin) write(name, s string) *Plugin {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.Dir, name), []byte(s), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return p
}

// Stdout sets what the following runs print: a text/template executed with a Data.
func (p *Plugin) Stdout(tmpl string) *Plugin { return p.write("stdout", tmpl) }

// Stderr sets what the following runs write to stderr.
func (p *Plugin) Stderr(s string) *Plugin { return p.write("stderr", s) }

// Exit sets the following runs' exit code.
func (p *Plugin) Exit(code int) *Plugin { return p.write("exit", strconv.Itoa(code)) }

// Sleep makes the following runs sleep d before they answer.
func (p *Plugin) Sleep(d time.Duration) *Plugin { return p.write("sleep", d.String()) }

// Hold makes the following runs wait, once recorded, until Release.
func (p *Plugin) Hold() *Plugin { return p.write("hold", "1") }

// Release lets held runs, and all later ones, answer.
func (p *Plugin) Release() { p.write("release", "1") }

// NoStdin makes the following runs leave stdin unread (a plugin that never reads it).
func (p *Plugin) NoStdin() *Plugin { return p.write("no-stdin", "1") }

// Behaviour makes the following runs run the package's behaviour name (see Main).
func (p *Plugin) Behaviour(name string) *Plugin { return p.write("behaviour", name) }

// Runs is how many runs have started.
func (p *Plugin) Runs() int {
	info, err := os.Stat(filepath.Join(p.Dir, "runs"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return int(info.Size())
}

// Calls is what each run so far was given, in order.
func (p *Plugin) Calls() []Call {
	p.t.Helper()
	files, err := filepath.Glob(filepath.Join(p.Dir, "calls", "*.json"))
	if err != nil {
		p.t.Fatal(err)
	}
	calls := make([]Call, 0, len(files))
	for _, f := range files { // Glob sorts, and the names are zero-padded run numbers
		b, err := os.ReadFile(f)
		if err != nil {
			p.t.Fatal(err)
		}
		var c Call
		if err := json.Unmarshal(b, &c); err != nil {
			p.t.Fatal(err)
		}
		calls = append(calls, c)
	}
	return calls
}
