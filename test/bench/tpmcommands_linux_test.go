//go:build linux

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kplug/kplug/internal/testkit/swtpm"
	"github.com/kplug/kplug/internal/testkit/testpki"
	"github.com/kplug/kplug/keys"
)

// tpmCommandNames name the TPM 2.0 command codes (TPM 2.0 Library, Part 2, 6.5) a key
// opened by kplug may send.
var tpmCommandNames = map[uint32]string{
	0x131: "CreatePrimary",
	0x157: "Load",
	0x15D: "Sign",
	0x165: "FlushContext",
	0x173: "ReadPublic",
	0x17A: "GetCapability",
}

func tpmCommandName(cc uint32) string {
	if n, ok := tpmCommandNames[cc]; ok {
		return n
	}
	return fmt.Sprintf("%#x", cc)
}

// tpmRecorder stands between kplug and a swtpm server socket and records the code of each
// TPM command that passes, whether a client sends one command per connection (as kplug's
// socket transport does) or many.
type tpmRecorder struct {
	Socket string // give this as device=

	target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	cmds   []string
}

func recordTPM(t *testing.T, tpm *swtpm.TPM) *tpmRecorder {
	t.Helper()
	dir, err := os.MkdirTemp("", "tpmrec") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &tpmRecorder{Socket: filepath.Join(dir, "tpm"), target: tpm.Socket}
	if r.ln, err = net.Listen("unix", r.Socket); err != nil {
		t.Fatal(err)
	}
	// kplug sends a key's auth value over a TPM socket only if no other user may write to it.
	if err := os.Chmod(r.Socket, 0o700); err != nil {
		t.Fatal(err)
	}
	r.wg.Go(r.serve)
	t.Cleanup(func() { _ = r.ln.Close(); r.wg.Wait() })
	return r
}

func (r *tpmRecorder) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() {
			defer c.Close()
			var up net.Conn
			defer func() {
				if up != nil {
					_ = up.Close()
				}
			}()
			for {
				cmd, err := readTPMMessage(c)
				if err != nil {
					return
				}
				if up == nil {
					if up, err = net.Dial("unix", r.target); err != nil {
						return
					}
				}
				r.mu.Lock()
				r.cmds = append(r.cmds, tpmCommandName(binary.BigEndian.Uint32(cmd[6:10])))
				r.mu.Unlock()
				if _, err := up.Write(cmd); err != nil {
					return
				}
				rsp, err := readTPMMessage(up)
				if err != nil {
					return
				}
				if _, err := c.Write(rsp); err != nil {
					return
				}
			}
		})
	}
}

// readTPMMessage reads one TPM command or response: a 10-byte header (tag, size of the
// whole message, command or response code) and the rest of its size.
func readTPMMessage(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > 1<<16 {
		return nil, errors.New("bad TPM message size")
	}
	msg := make([]byte, size)
	copy(msg, hdr)
	_, err := io.ReadFull(r, msg[10:])
	return msg, err
}

// take returns the commands recorded since the last take.
func (r *tpmRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmds := r.cmds
	r.cmds = nil
	return cmds
}

// TestTPMKeyCommandsPerRequest checks what the TPM does for each request once a TPM key is
// open, as the benchmarks' key-signs/op cannot (a key loaded again for each signature
// would not count as a signature): one TPM2_Sign per full TLS handshake and per KEP-6308
// signature, and no command at all for a request over a pooled connection or a resumed
// session.
func TestTPMKeyCommandsPerRequest(t *testing.T) {
	tpm := swtpm.NewTestTPM(t)
	keyFile, err := tpmKeyFile(tpm, "k", "ecc256")
	if err != nil {
		t.Fatal(err)
	}
	rec := recordTPM(t, tpm)
	keyURI := tpmURI(keyFile, rec.Socket)
	ca := testpki.NewTestCA(t, "bench CA")
	pooled, closing := mtlsUpstream(t, ca, false), mtlsUpstream(t, ca, true)
	signer, closer, err := keys.OpenSigner(keyURI, keys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	certFile := issueClient(t, ca, "tpm", signer.Public())
	const requests = 4
	signs := slices.Repeat([]string{"Sign"}, requests)

	for _, tc := range []struct {
		name   string
		closes bool // a new upstream connection per request
		resume bool
		want   []string
	}{
		{"pooled", false, true, nil},
		{"new-conn-full-handshake", true, false, signs},
		{"new-conn-resumed", true, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream := pooled
			if tc.closes {
				upstream = closing
			}
			var n atomic.Int64
			p := path{base: upstream.Host, client: startKplugProxy(t, upstream, withClientKey(t, certFile, keyURI, tc.resume, &n))}
			p.get(t) // opens the key, and makes the first, full, handshake
			rec.take()
			for range requests {
				p.get(t)
			}
			if got := rec.take(); !slices.Equal(got, tc.want) {
				t.Errorf("TPM commands for %d requests = %v, want %v", requests, got, tc.want)
			}
		})
	}

	t.Run("httpsig", func(t *testing.T) {
		s := benchSigner(t, signer)
		rec.take()
		for range requests {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://cluster.example:6443/api/v1/pods", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Sign(req); err != nil {
				t.Fatal(err)
			}
		}
		if got := rec.take(); !slices.Equal(got, signs) {
			t.Errorf("TPM commands for %d signed requests = %v, want %v", requests, got, signs)
		}
	})
}
