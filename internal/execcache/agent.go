package execcache

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/peercred"
)

// AgentEnv names the agent's socket for the remote side, as --agent does: set in a dev
// container or an SSH session, it sends every exec-cache call there.
const AgentEnv = "KPLUG_EXEC_CACHE_AGENT"

// The agent's wire: one request and one answer per connection, each a 4-byte big-endian
// length and that many bytes of JSON. Both are bounded, so that a remote cannot make either
// side hold more than this.
const (
	maxAgentRequest = 64 << 10
	maxAgentAnswer  = 1 << 20
	agentVersion    = 1
)

// agentAnswerTimeout bounds the remote's wait for an answer: long enough for the agent to
// wait out another call's login (DefaultLockTimeout) and run the plugin, not forever. A
// variable for tests.
var agentAnswerTimeout = 15 * time.Minute

// agentRequest is what the remote side asks: the command line its exec block wraps, and
// what its client said in KUBERNETES_EXEC_INFO. Host and Client are declared by the remote,
// for the workstation's log and for noticing a refresh; nothing trusts them further.
type agentRequest struct {
	Version int      `json:"v"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Info    string   `json:"info"`
	Host    string   `json:"host,omitempty"`
	Client  Client   `json:"client"`
}

// agentAnswer is the agent's answer: the plugin's stdout, or why there is none and the exit
// code to leave with.
type agentAnswer struct {
	Stdout []byte `json:"stdout,omitempty"`
	Error  string `json:"error,omitempty"`
	Code   int    `json:"code,omitempty"`
}

// AgentError is the agent's refusal or the workstation plugin's failure, as the remote side
// reports it; Code is the exit code.
type AgentError struct {
	Socket string
	Msg    string
	Code   int
}

func (e *AgentError) Error() string {
	return "exec-cache: the agent at " + e.Socket + ": " + e.Msg
}

// AgentGoneError says nothing answers at the agent's socket.
type AgentGoneError struct {
	Socket string
	Err    error
}

func (e *AgentGoneError) Error() string {
	return fmt.Sprintf("exec-cache: no agent answers at %s (%v): run `kplug exec-cache --serve` on your workstation and forward its socket here: "+
		"ssh -R %s:<the socket it prints> for an SSH session, or a bind mount of its directory for a dev container (docs/exec-credentials.md); "+
		"to run the plugin here instead, unset %s or drop --agent", e.Socket, shortErr(e.Err), e.Socket, AgentEnv)
}

func (e *AgentGoneError) Unwrap() error { return e.Err }

// shortErr is err's innermost cause for a message: "connection refused" rather than the
// whole dial path, which the message names already.
func shortErr(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// askAgent sends one call to the agent at socket and writes its answer to out: the remote
// side of the agent. Nothing is written to disk: the answer goes from the socket to out.
func askAgent(ctx context.Context, socket string, args []string, environ []string, client Client, out io.Writer) error {
	if len(args) == 0 {
		return &UsageError{Err: errors.New("no plugin to ask the agent for: give it after --, as the workstation's kubeconfig names it")}
	}
	req := agentRequest{Version: agentVersion, Command: args[0], Args: args[1:], Info: lookupEnv(environ, wire.InfoEnv), Client: client}
	if req.Info == "" {
		return &UsageError{Err: errors.New(wire.InfoEnv + " is not set, so no client ran this, and the agent answers clients only: try it with a client, e.g. kubectl auth whoami")}
	}
	req.Host, _ = os.Hostname()
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(body) > maxAgentRequest {
		return &UsageError{Err: fmt.Errorf("the request to the agent would be %d bytes, more than the %d it reads: shorten the command line", len(body), maxAgentRequest)}
	}
	// A connection closed before any answer came (under a flood the agent closes the
	// connections that have waited longest, and one may be this, its request unread) is
	// tried once more: asking again is harmless, and a second refresh is bounded.
	var frame []byte
	for attempt := 1; ; attempt++ {
		var unanswered bool
		frame, unanswered, err = exchange(ctx, socket, body)
		if err == nil || !unanswered || attempt == 2 {
			break
		}
	}
	if err != nil {
		return err
	}
	var ans agentAnswer
	if err := json.Unmarshal(frame, &ans); err != nil {
		return fmt.Errorf("exec-cache: the agent at %s answered something that is not an answer: %w", socket, err)
	}
	if ans.Error != "" {
		code := ans.Code
		if code <= 0 || code > 125 {
			code = 1
		}
		return &AgentError{Socket: socket, Msg: ans.Error, Code: code}
	}
	_, err = out.Write(ans.Stdout)
	return err
}

// agentDialTimeout bounds the remote's wait to connect, a full queue at the agent included.
const agentDialTimeout = 5 * time.Second

// dialAgent connects to the agent's socket. A full accept queue (EAGAIN) is waited out, up
// to agentDialTimeout, rather than reported: Go's connect to a unix socket fails at once
// where a blocking connect waits for room, so a remote flooding the agent with blocking

// exchange sends body to the agent at socket and reads its answer. unanswered says the
// connection ended without a byte of an answer.
func exchange(ctx context.Context, socket string, body []byte) (frame []byte, unanswered bool, err error) {
	conn, err := dialAgent(ctx, socket)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return nil, false, &AgentGoneError{Socket: socket, Err: err}
	case err != nil:
		return nil, false, fmt.Errorf("exec-cache: connecting to the agent at %s: %w", socket, err)
	}
	defer func() { _ = conn.Close() }()
	// Whoever listens on the socket gets the request and chooses the credential: it must
	// be this user (or root), not someone who put a socket where the agent's was.
	if err := peercred.CheckOwnerOrRoot(conn); err != nil && !errors.Is(err, peercred.ErrUnsupported) {
		return nil, false, fmt.Errorf("exec-cache: the agent at %s: %w", socket, err)
	}
	_ = conn.SetDeadline(time.Now().Add(agentAnswerTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	// An agent that refuses the connection answers before reading the request and closes:
	// the write then fails, and its answer is still there to read.
	writeErr := writeFrame(conn, body)
	frame, err = readFrame(conn, maxAgentAnswer)
	switch {
	case err == nil:
		return frame, false, nil
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, false, fmt.Errorf("exec-cache: the agent at %s did not answer within %v", socket, agentAnswerTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		why := errors.New("it closed the connection without an answer")
		if writeErr != nil {
			why = writeErr
		}
		return nil, true, &AgentGoneError{Socket: socket, Err: why}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, false, &AgentGoneError{Socket: socket, Err: errors.New("it closed the connection in the middle of its answer")}
	}
	return nil, false, fmt.Errorf("exec-cache: reading the agent's answer from %s: %w", socket, err)
}

// connects would otherwise take every place in the queue and keep this client out.
func dialAgent(ctx context.Context, socket string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, agentDialTimeout)
	defer cancel()
	var d net.Dialer
	pause := time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "unix", socket)
		if !errors.Is(err, syscall.EAGAIN) {
			return conn, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("its queue of connections stayed full for %v: %w", agentDialTimeout, err)
		case <-t.C:
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// writeFrame writes one length-prefixed frame; both sides bound theirs far below 4 GiB.
func writeFrame(w io.Writer, body []byte) error {
	if len(body) > maxAgentAnswer {
		return errFrameTooLarge
	}
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body))) //nolint:gosec // bounded just above
	copy(frame[4:], body)
	_, err := w.Write(frame)
	return err
}

// errFrameTooLarge is a frame announcing more than its reader takes.
var errFrameTooLarge = errors.New("frame too large")

// readFrame reads one length-prefixed frame of at most limit bytes; a larger one is refused
// from its length, before anything of it is read.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if int64(size) > int64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", errFrameTooLarge, size, limit)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}
