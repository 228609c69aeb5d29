package exectest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Main(map[string]func() int{
		"custom": func() int { os.Stdout.WriteString("custom"); return 4 },
		// echo answers with what the run was given, as Current reports it.
		"echo": func() int { c := Current(); os.Stdout.WriteString(strings.Join(c.Args, ",") + " " + c.Stdin); return 0 },
	})
	os.Exit(m.Run())
}

func runFake(t *testing.T, p *Plugin, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), p.Path(), args...)
	cmd.Env = append(os.Environ(), append(p.Env(), infoEnv+`={"spec":{"cluster":{"server":"https://k"}}}`)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out) + "|" + stderr.String(), code
}

func TestFake(t *testing.T) {
	p := New(t).Stdout(`run {{.Run}} image {{index .Request "image"}} server {{.Info.spec.cluster.server}}`).Stderr("oops").Exit(3)
	out, code := runFake(t, p, `{"image":"registry.io/app"}`, "a", "b")
	if want := "run 1 image registry.io/app server https://k|oops"; out != want || code != 3 {
		t.Errorf("got %q, exit %d; want %q, exit 3", out, code, want)
	}
	p.Exit(0).Stderr("")
	if out, _ := runFake(t, p, "", "c"); out != "run 2 image <no value> server https://k|" {
		t.Errorf("second run: %q", out)
	}
	if p.Runs() != 2 {
		t.Errorf("Runs = %d", p.Runs())
	}
	calls := p.Calls()
	if len(calls) != 2 || strings.Join(calls[0].Args, ",") != "a,b" || calls[0].Stdin != `{"image":"registry.io/app"}` || !strings.Contains(calls[1].Info, "https://k") {
		t.Errorf("Calls = %+v", calls)
	}
	p.Behaviour("custom")
	if out, code := runFake(t, p, ""); out != "custom|" || code != 4 {
		t.Errorf("behaviour: %q, exit %d", out, code)
	}
	p.Behaviour("echo")
	if out, code := runFake(t, p, `{"image":"registry.io/app"}`, "x", "y"); out != `x,y {"image":"registry.io/app"}|` || code != 0 {
		t.Errorf("behaviour reading Current: %q, exit %d", out, code)
	}
}
