package execplugin

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
)

// Stdin says what the plugin reads on standard input. The zero value is the null device.
type Stdin struct {
	terminal *os.File
	data     []byte
	hasData  bool
}

// TerminalStdin hands the plugin the caller's terminal (usually os.Stdin) itself, so that
// it can prompt for and read input, such as a password or a one-time code.
func TerminalStdin(f *os.File) Stdin { return Stdin{terminal: f} }

// BytesStdin gives the plugin data on stdin, followed by end of file.
func BytesStdin(data []byte) Stdin { return Stdin{data: data, hasData: true} }

// IsTerminal reports whether the plugin reads the caller's terminal.
func (s Stdin) IsTerminal() bool { return s.terminal != nil }

func (s Stdin) reader() io.Reader {
	switch {
	case s.terminal != nil:
		return s.terminal
	case s.hasData:
		return bytes.NewReader(s.data)
	default:
		return nil // os/exec opens the null device
	}
}

var errOutputTooLarge = errors.New("output too large")

// cappedBuffer collects up to limit bytes; the write that would exceed it fails and calls
// overflow once, which kills the plugin.
type cappedBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	limit    int
	over     bool
	overflow func()
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over {
		return 0, errOutputTooLarge
	}
	if b.buf.Len()+len(p) > b.limit {
		b.over = true
		b.overflow()
		return 0, errOutputTooLarge
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) exceeded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

// tailWriter passes everything to w (ignoring w's errors: a closed host stderr must not
// stop the plugin) and keeps the last size bytes.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	size int
	tail []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.size {
		t.tail = append(t.tail[:0], p[len(p)-t.size:]...)
		return len(p), nil
	}
	if drop := len(t.tail) + len(p) - t.size; drop > 0 {
		t.tail = append(t.tail[:0], t.tail[drop:]...)
	}
	t.tail = append(t.tail, p...)
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.tail)
}
