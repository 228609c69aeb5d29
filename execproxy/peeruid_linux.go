//go:build linux

package execproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid of the process that opened the other end of c, a TCP connection
// accepted on an IPv4 loopback address. The kernel knows who created each socket; the
// bridge asks it over NETLINK_SOCK_DIAG (as ss does) for the one socket whose local
// address is c's remote address, an exact lookup that costs the same however many sockets
// the host has.
func peerUID(c net.Conn) (uint32, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok || !ok2 || !local.AddrPort().Addr().Unmap().Is4() || !remote.AddrPort().Addr().Unmap().Is4() {
		return 0, fmt.Errorf("peer uid: %s to %s is not an IPv4 TCP connection", c.RemoteAddr(), c.LocalAddr())
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("peer uid: netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// The answer is immediate; the timeout only keeps a broken kernel from holding the
	// bridge's accept loop.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, fmt.Errorf("peer uid: %w", err)
	}
	if err := unix.Sendto(fd, diagRequest(remote, local), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("peer uid: sock_diag request: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("peer uid: sock_diag answer: %w", err)
	}
	return diagUID(buf[:n])
}

// Sizes and offsets of struct nlmsghdr, struct inet_diag_req_v2 and struct
// inet_diag_msg (linux/netlink.h, linux/inet_diag.h).
const (
	nlmsgHeaderLen  = 16
	diagReqLen      = 56 // family, protocol, ext, pad, states, then struct inet_diag_sockid
	diagMsgStateAt  = 1
	diagMsgUIDAt    = 64 // family, state, timer, retrans, sockid (48), expires, rqueue, wqueue
	diagMsgInodeAt  = 68
	diagMsgLen      = 72
	diagSockIDIfAt  = 36 // within struct inet_diag_sockid: ports (4), src (16), dst (16)
	diagNoCookie    = ^uint32(0)
	diagAllStates   = ^uint32(0)
	nlmsgErrorCode  = 16 // within an NLMSG_ERROR message: the negative errno
	nlmsgErrorValue = 4
	tcpTimeWait     = 6 // TCP_TIME_WAIT of enum tcp_state (net/tcp_states.h)
)

// diagRequest asks for the TCP socket whose own (local) address is src and whose peer is
// dst.
func diagRequest(src, dst *net.TCPAddr) []byte {
	ne := binary.NativeEndian
	b := make([]byte, nlmsgHeaderLen+diagReqLen)
	ne.PutUint32(b[0:], nlmsgHeaderLen+diagReqLen)
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1) // sequence number; one request per socket
	r := b[nlmsgHeaderLen:]
	r[0], r[1] = unix.AF_INET, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], diagAllStates)
	id := r[8:]
	s, d := src.AddrPort(), dst.AddrPort()
	binary.BigEndian.PutUint16(id[0:], s.Port())
	binary.BigEndian.PutUint16(id[2:], d.Port())
	s4, d4 := s.Addr().Unmap().As4(), d.Addr().Unmap().As4()
	copy(id[4:20], s4[:])
	copy(id[20:36], d4[:])
	ne.PutUint32(id[diagSockIDIfAt+4:], diagNoCookie) // the cookie is unknown: match by address
	ne.PutUint32(id[diagSockIDIfAt+8:], diagNoCookie)
	return b
}

// diagUID reads the owner's uid from the kernel's answer to diagRequest.
func diagUID(b []byte) (uint32, error) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHeaderLen {
		return 0, errors.New("peer uid: short sock_diag answer")
	}
	switch ne.Uint16(b[4:]) {
	case unix.NLMSG_ERROR:
		if len(b) >= nlmsgHeaderLen+nlmsgErrorValue {
			// The kernel's errno, negated, in two's complement.
			if code := ne.Uint32(b[nlmsgErrorCode:]); code != 0 {
				errno := syscall.Errno(^code + 1)
				if errno == syscall.ENOENT {
					// No such socket: the client reset its connection, or closed it and
					// the kernel already forgot it.
					return 0, fmt.Errorf("%w (sock_diag: %w)", errPeerGone, errno)
				}
				return 0, fmt.Errorf("peer uid: sock_diag: %w", errno)
			}
		}
		return 0, errors.New("peer uid: sock_diag answered with an error")
	case unix.SOCK_DIAG_BY_FAMILY:
		if len(b) < nlmsgHeaderLen+diagMsgLen {
			return 0, errors.New("peer uid: short sock_diag message")
		}
		// A socket its process has closed (FIN_WAIT1, FIN_WAIT2, CLOSING, LAST_ACK,
		// TIME_WAIT) is an orphan: it has no inode any more, and the kernel reports uid 0
		// for it (for every orphan on older kernels, for those waiting in FIN_WAIT2 or
		// TIME_WAIT on all). That is nobody, not root. A socket a process holds always has
		// an inode.
		msg := b[nlmsgHeaderLen:]
		if ne.Uint32(msg[diagMsgInodeAt:]) == 0 || msg[diagMsgStateAt] == tcpTimeWait {
			return 0, errPeerGone
		}
		return ne.Uint32(msg[diagMsgUIDAt:]), nil
	}
	return 0, fmt.Errorf("peer uid: unexpected sock_diag message type %d", ne.Uint16(b[4:]))
}
