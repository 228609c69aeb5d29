//go:build unix

package imagecred

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as a provider plugin: with helperEnv set (through the provider's
// config env, as a real deployment would pass settings) it acts as the plugin.
const (
	helperEnv      = "KPLUG_IMAGECRED_HELPER"   // mode
	helperLog      = "KPLUG_IMAGECRED_LOG"      // file: every request is appended, one per line
	helperResponse = "KPLUG_IMAGECRED_RESPONSE" // what to print; $TOKEN and $IMAGE are replaced
	helperRelease  = "KPLUG_IMAGECRED_RELEASE"  // file: answer only once it exists
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	// A race-enabled helper otherwise sleeps a second on exit before reporting races.
	_ = os.Setenv("GORACE", "atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	goleak.VerifyTestMain(m)
}

func helper(mode string) int {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return 9
	}
	if log := os.Getenv(helperLog); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 9
		}
		_, _ = f.Write(in)
		_ = f.Close()
	}
	if release := os.Getenv(helperRelease); release != "" {
		for {
			if _, err := os.Stat(release); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var req struct {
		Image string `json:"image"`
		Token string `json:"serviceAccountToken"`
	}
	_ = json.Unmarshal(in, &req)
	switch mode {
	case "respond":
		out := strings.NewReplacer("$TOKEN", req.Token, "$IMAGE", req.Image).Replace(os.Getenv(helperResponse))
		fmt.Print(out)
		return 0
	case "fail":
		fmt.Fprint(os.Stderr, "registry said no")
		return 3
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 99
}

// installPlugin makes name in binDir run the test binary.
func installPlugin(t *testing.T, binDir, name string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(binDir, name)); err != nil {
		t.Fatal(err)
	}
}

// requests returns the requests the plugin logged, one per exec, without their newlines.
func requests(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}
