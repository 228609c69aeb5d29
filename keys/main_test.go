package keys_test

import (
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// recordingListenerEnv makes the test binary a recording socket listener, for a test that
// runs it as another user: the socket path in it, the file to record into in its _OUT.
const recordingListenerEnv = "KPLUG_TEST_RECORDING_LISTENER"

func TestMain(m *testing.M) {
	if sock := os.Getenv(recordingListenerEnv); sock != "" {
		os.Exit(recordingListener(sock, os.Getenv(recordingListenerEnv+"_OUT")))
	}
	code := m.Run()
	// The tests' clients keep connections to their (closed) servers in the default pool.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// recordingListener listens on the unix socket sock, says so by creating sock+".ready",
// and appends the first bytes each connection sends to the file out, answering nothing.
func recordingListener(sock, out string) int {
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	if err := os.WriteFile(sock+".ready", nil, 0o600); err != nil {
		return 1
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		_ = c.Close()
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return 1
		}
		_, _ = f.Write(b[:n])
		_ = f.Close()
	}
}
