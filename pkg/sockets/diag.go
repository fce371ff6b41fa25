package sockets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DiagReader dumps TCP sockets over NETLINK_SOCK_DIAG (inet_diag) with tcp_info. Dumping
// needs no capability (net/ipv4/inet_diag.c asks for CAP_NET_ADMIN only for extras such as
// socket marks), the kernel filters on the local port so only watched sockets are formatted,
// and tcp_info adds bytes received and time since the last data, which tell an idle
// connection from a used one. It packs its few messages by hand on package syscall: a
// netlink library would add more to the binary than this whole package does
// (github.com/vishvananda/netlink adds about 240 KiB to a static binary).
//
// Like /proc/net/tcp, a dump makes the kernel walk the whole established hash table, which is
// shared by every network namespace of the node and sized by the node's memory, and look at
// every TCP socket on the node, so a read costs milliseconds on a big, busy node whatever the
// pod itself holds.
type DiagReader struct{}

// Message layouts from include/uapi/linux/inet_diag.h.
const (
	// TCPDIAG_GETSOCK with struct inet_diag_req, the original request. Unlike
	// SOCK_DIAG_BY_FAMILY with inet_diag_req_v2, which names one address family, it dumps
	// IPv4 and IPv6 sockets in one walk of the hash table (net/ipv4/inet_diag.c
	// inet_diag_dump_compat sets AF_UNSPEC), which halves the kernel's fixed cost.
	tcpDiagGetSock = 18
	inetDiagReqLen = 60 // struct inet_diag_req
	inetDiagMsgLen = 72 // struct inet_diag_msg
	inetDiagInfo   = 2  // INET_DIAG_INFO: the attribute that carries struct tcp_info
	inetDiagReqBC  = 1  // INET_DIAG_REQ_BYTECODE: the filter attribute of a request
	bcJmp          = 1  // INET_DIAG_BC_JMP
	bcSrcPortGE    = 2  // INET_DIAG_BC_S_GE
	bcSrcPortLE    = 3  // INET_DIAG_BC_S_LE

	// Offsets in struct tcp_info (include/uapi/linux/tcp.h).
	tcpiLastDataSent  = 44
	tcpiLastDataRecv  = 52
	tcpiBytesReceived = 128
	tcpiDataSegsIn    = 152
	tcpiDataSegsOut   = 156

	// Every state but LISTEN (a bit per state, as in TCPF_* of include/net/tcp_states.h).
	notListening = (1<<(NewSynRecv+1) - 1) &^ (1 << Listen) &^ 1
)

// Read dumps the IPv4 and IPv6 sockets whose local port is one of ports, listeners left out.
func (DiagReader) Read(ports []uint16) ([]Socket, error) { return dump(ports, notListening) }

// Listeners dumps the listening sockets on ports, or every listening socket for no ports. A
// dump of listeners alone walks only the listening hash, not the established one: it is cheap.
func (DiagReader) Listeners(ports []uint16) ([]Socket, error) { return dump(ports, 1<<Listen) }

// dump asks for the sockets on ports in the given states (a bit per state); listeners are
// dumped on every port when no ports are given.
func dump(ports []uint16, states uint32) ([]Socket, error) {
	if len(ports) == 0 && states != 1<<Listen {
		return nil, nil
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("opening a NETLINK_SOCK_DIAG socket: %w", err)
	}
	defer syscall.Close(fd)
	// A dump always ends with NLMSG_DONE; the timeout only keeps a kernel bug from hanging
	// the drain.
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &syscall.Timeval{Sec: 5}); err != nil {
		return nil, fmt.Errorf("setting a receive timeout on the NETLINK_SOCK_DIAG socket: %w", err)
	}
	const seq = 1
	if err := syscall.Sendto(fd, diagRequest(ports, states, seq), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sending a sock_diag dump request: %w", err)
	}
	buf := dumpBuffers.Get().(*[]byte)
	defer dumpBuffers.Put(buf)
	listeners := states == 1<<Listen
	size := lastDumpSize.Load()
	if listeners {
		size = int64(len(ports))
	}
	socks, err := receiveDump(fd, *buf, seq, make([]Socket, 0, size))
	if err != nil {
		return nil, fmt.Errorf("reading the sock_diag dump: %w", err)
	}
	if !listeners {
		lastDumpSize.Store(int64(len(socks)))
	}
	return socks, nil
}

// A read allocates its result once, sized by the previous read, and reuses its receive
// buffer: with 2,000 sockets, growing the slice and a fresh buffer per read cost more CPU
// (1.5 ms a read, mostly the garbage collector's) than parsing (0.2 ms).
var (
	// dumpBuffers hold 32 KiB each: the kernel fills at most that per dump datagram.
	dumpBuffers  = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	lastDumpSize atomic.Int64
)

// diagRequest packs a dump request: nlmsghdr, then inet_diag_req {family, src_len, dst_len,
// ext uint8; sockid [48]byte; states, dbs uint32} asking for tcp_info of every address
// family in the given states, then a bytecode filter that accepts a socket whose local port
// is one of ports (none for no ports: every socket).
func diagRequest(ports []uint16, states, seq uint32) []byte {
	filter := portFilter(ports)
	attrLen := 4 + len(filter)
	if len(filter) == 0 {
		attrLen = 0 // the kernel refuses an empty program: no filter at all keeps every socket
	}
	total := syscall.NLMSG_HDRLEN + inetDiagReqLen + attrLen
	b := make([]byte, total)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(total))
	ne.PutUint16(b[4:], tcpDiagGetSock)
	ne.PutUint16(b[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP)
	ne.PutUint32(b[8:], seq)
	r := b[syscall.NLMSG_HDRLEN:]
	r[0] = syscall.AF_UNSPEC
	r[3] = 1 << (inetDiagInfo - 1) // idiag_ext
	ne.PutUint32(r[52:], states)
	if attrLen == 0 {
		return b
	}
	a := r[inetDiagReqLen:]
	ne.PutUint16(a[0:], uint16(attrLen))
	ne.PutUint16(a[2:], inetDiagReqBC)
	copy(a[4:], filter)
	return b
}

// portFilter compiles "sport == p1 || sport == p2 || ..." into inet_diag bytecode as ss(8)
// does (iproute2 misc/ss.c ssfilter_bytecompile). Each op is {code, yes, no} followed, for a
// port comparison, by an op whose no field holds the port. The kernel (inet_diag_bc_run)
// accepts a socket when the program ends exactly at its end and rejects it when a jump lands
// past it. Equality is S_GE && S_LE, which every kernel with inet_diag knows (S_EQ is 4.16+).
//
//	match(p)   = [S_GE yes=8 no=20][p][S_LE yes=8 no=12][p]   (no: 4 bytes past its end)
//	a || rest  = match(a) [JMP yes=4 no=len(rest)+4] rest     (a's no lands on rest)
func portFilter(ports []uint16) []byte {
	const matchLen = 16
	ne := binary.NativeEndian
	var out []byte
	for i, p := range ports {
		m := make([]byte, matchLen)
		m[0], m[1] = bcSrcPortGE, 8
		ne.PutUint16(m[2:], matchLen+4)
		ne.PutUint16(m[6:], p)
		m[8], m[9] = bcSrcPortLE, 8
		ne.PutUint16(m[10:], 8+4)
		ne.PutUint16(m[14:], p)
		out = append(out, m...)
		if i < len(ports)-1 {
			restLen := (len(ports)-i-1)*(matchLen+4) - 4
			jmp := []byte{bcJmp, 4, 0, 0}
			ne.PutUint16(jmp[2:], uint16(restLen+4))
			out = append(out, jmp...)
		}
	}
	return out
}

// receiveDump reads the datagrams of one dump until NLMSG_DONE.
func receiveDump(fd int, buf []byte, seq uint32, socks []Socket) ([]Socket, error) {
	ne := binary.NativeEndian
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return socks, err
		}
		b := buf[:n]
		for len(b) >= syscall.NLMSG_HDRLEN {
			msgLen := int(ne.Uint32(b[0:]))
			typ := ne.Uint16(b[4:])
			if msgLen < syscall.NLMSG_HDRLEN || msgLen > len(b) {
				return socks, fmt.Errorf("netlink message of %d bytes in a datagram of %d", msgLen, len(b))
			}
			body := b[syscall.NLMSG_HDRLEN:msgLen]
			if ne.Uint32(b[8:]) == seq {
				switch typ {
				case syscall.NLMSG_DONE:
					// Since Linux 4.x the payload of DONE is the dump's error code.
					if len(body) >= 4 && int32(ne.Uint32(body)) < 0 {
						return socks, syscall.Errno(-int32(ne.Uint32(body)))
					}
					return socks, nil
				case syscall.NLMSG_ERROR:
					if len(body) >= 4 && int32(ne.Uint32(body)) < 0 {
						return socks, syscall.Errno(-int32(ne.Uint32(body)))
					}
				case tcpDiagGetSock:
					s, err := parseDiagMsg(body)
					if err != nil {
						return socks, err
					}
					socks = append(socks, s)
				}
			}
			aligned := (msgLen + syscall.NLMSG_ALIGNTO - 1) &^ (syscall.NLMSG_ALIGNTO - 1)
			if aligned > len(b) {
				break
			}
			b = b[aligned:]
		}
	}
}

// parseDiagMsg reads struct inet_diag_msg and its INET_DIAG_INFO attribute:
//
//	family, state, timer, retrans uint8; sockid {sport, dport be16; src, dst [16]byte;
//	if uint32; cookie [2]uint32}; expires, rqueue, wqueue, uid, inode uint32
func parseDiagMsg(b []byte) (Socket, error) {
	if len(b) < inetDiagMsgLen {
		return Socket{}, fmt.Errorf("inet_diag_msg of %d bytes, want %d", len(b), inetDiagMsgLen)
	}
	ne := binary.NativeEndian
	be := binary.BigEndian
	s := Socket{State: State(b[1])}
	family := b[0]
	addr := func(raw []byte) netip.Addr {
		if family == syscall.AF_INET {
			return netip.AddrFrom4([4]byte(raw[:4]))
		}
		return netip.AddrFrom16([16]byte(raw[:16])).Unmap()
	}
	s.Local = netip.AddrPortFrom(addr(b[8:24]), be.Uint16(b[4:]))
	s.Remote = netip.AddrPortFrom(addr(b[24:40]), be.Uint16(b[6:]))
	s.Cookie = uint64(ne.Uint32(b[44:])) | uint64(ne.Uint32(b[48:]))<<32
	s.RxQueue = ne.Uint32(b[56:])
	s.UID = ne.Uint32(b[64:])
	s.Inode = uint64(ne.Uint32(b[68:]))

	for attrs := b[inetDiagMsgLen:]; len(attrs) >= 4; {
		attrLen := int(ne.Uint16(attrs[0:]))
		if attrLen < 4 || attrLen > len(attrs) {
			return s, fmt.Errorf("inet_diag attribute of %d bytes in %d", attrLen, len(attrs))
		}
		if ne.Uint16(attrs[2:]) == inetDiagInfo {
			info := attrs[4:attrLen]
			if len(info) >= tcpiBytesReceived+8 {
				s.HasTCPInfo = true
				s.SinceLastDataRecv = time.Duration(ne.Uint32(info[tcpiLastDataRecv:])) * time.Millisecond
				s.SinceLastDataSent = time.Duration(ne.Uint32(info[tcpiLastDataSent:])) * time.Millisecond
				if len(info) >= tcpiDataSegsOut+4 {
					s.NothingSent = ne.Uint32(info[tcpiDataSegsOut:]) == 0
					s.DataSegsIn = ne.Uint32(info[tcpiDataSegsIn:])
				}
				s.BytesReceived = ne.Uint64(info[tcpiBytesReceived:])
				if finReceived(s.State) && s.BytesReceived > 0 {
					// The kernel adds a received FIN's sequence number to the count
					// (net/ipv4/tcp_input.c tcp_rcv_nxt_update): a close is not data.
					s.BytesReceived--
				}
			}
		}
		aligned := (attrLen + 3) &^ 3
		if aligned >= len(attrs) {
			break
		}
		attrs = attrs[aligned:]
	}
	return s, nil
}

// finReceived reports whether a socket in state s has taken in its peer's FIN.
func finReceived(s State) bool {
	return s == CloseWait || s == LastAck || s == Closing || s == TimeWait
}
