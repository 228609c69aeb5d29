package peercred

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestOfAUnixSocketPeer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, err := Of(conn)
	if err != nil || int(c.UID) != os.Geteuid() || int(c.PID) != os.Getpid() {
		t.Errorf("Of = %+v, %v; want uid %d pid %d", c, err, os.Geteuid(), os.Getpid())
	}
	if err := CheckOwnerOrRoot(conn); err != nil {
		t.Error(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tc, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := Of(tc); err == nil {
		t.Error("Of a TCP connection: no error")
	}
}
