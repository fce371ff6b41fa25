package sockets

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
)

// ProcReader reads /proc/net/tcp and /proc/net/tcp6, which are world-readable (the kernel
// creates them with mode 0444, net/ipv4/tcp_ipv4.c tcp4_proc_init_net). They give state,
// queues and inode, but not bytes received: a read cannot tell an idle connection from one that
// carried requests since the last read. The kernel formats every socket of the namespace, so
// its cost grows with all TCP sockets, not only the watched ones.
type ProcReader struct {
	// Root is where proc is mounted; "" means /proc.
	Root string
}

// Read returns the watched sockets of /proc/net/tcp and, when IPv6 is enabled, /proc/net/tcp6,
// listeners left out.
func (p ProcReader) Read(ports []uint16) ([]Socket, error) { return p.read(ports, false) }

// Listeners returns the listening sockets on ports, or every listening socket for no ports.
func (p ProcReader) Listeners(ports []uint16) ([]Socket, error) { return p.read(ports, true) }

func (p ProcReader) read(ports []uint16, listeners bool) ([]Socket, error) {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	var socks []Socket
	for _, name := range []string{"tcp", "tcp6"} {
		path := filepath.Join(root, "net", name)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) && name == "tcp6" {
			continue // kernel without IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("reading TCP sockets: %w", err)
		}
		socks, err = parseProcNetTCP(f, ports, listeners, socks)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading TCP sockets from %s: %w", path, err)
		}
	}
	return socks, nil
}

// parseProcNetTCP appends to socks the watched sockets of one /proc/net/tcp or tcp6 file.
//
// The format is the kernel's (net/ipv4/tcp_ipv4.c get_tcp4_sock, get_timewait4_sock;
// net/ipv6/tcp_ipv6.c get_tcp6_sock; described in Documentation/networking/proc_net_tcp.rst):
//
//	sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
//	 0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 43712 1 ...
//
// Addresses are the in-memory words of the network-order address printed with %08X, so each
// 32-bit word reads in the host's byte order (0100007F is 127.0.0.1 on little-endian hosts);
// ports are printed in host order. TIME_WAIT lines have inode 0.
func parseProcNetTCP(r io.Reader, ports []uint16, listeners bool, socks []Socket) ([]Socket, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	header, err := br.ReadSlice('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(header) > 0) {
		return socks, fmt.Errorf("no header line: %w", err)
	}
	if !bytes.HasPrefix(bytes.TrimLeft(header, " "), []byte("sl")) {
		return socks, fmt.Errorf("unexpected header %q", bytes.TrimSpace(header))
	}
	var field [10][]byte
	for lineNo := 2; ; lineNo++ {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if n := splitFields(line, field[:]); n < len(field) {
				return socks, fmt.Errorf("line %d: %d fields, want at least %d", lineNo, n, len(field))
			}
			s, ok, perr := parseProcLine(field[:], ports, listeners)
			if perr != nil {
				return socks, fmt.Errorf("line %d: %w", lineNo, perr)
			}
			if ok {
				socks = append(socks, s)
			}
		}
		if errors.Is(err, io.EOF) {
			return socks, nil
		}
		if err != nil {
			return socks, err // bufio.ErrBufferFull: a line longer than 64 KiB is not this format
		}
	}
}

// parseProcLine turns the first ten fields of a line into a Socket; ok is false for a socket
// that is not watched, or is a listener when listeners is false and not one when it is true.
func parseProcLine(field [][]byte, ports []uint16, listeners bool) (s Socket, ok bool, err error) {
	local, remote := field[1], field[2]
	i := bytes.IndexByte(local, ':')
	if i < 0 {
		return s, false, fmt.Errorf("local address %q has no port", local)
	}
	port, perr := strconv.ParseUint(string(local[i+1:]), 16, 16)
	if perr != nil {
		return s, false, fmt.Errorf("local port %q: %w", local[i+1:], perr)
	}
	if !watched(ports, uint16(port)) && (!listeners || len(ports) > 0) {
		return s, false, nil
	}
	st, perr := strconv.ParseUint(string(field[3]), 16, 8)
	if perr != nil {
		return s, false, fmt.Errorf("state %q: %w", field[3], perr)
	}
	s.State = State(st)
	if (s.State == Listen) != listeners {
		return s, false, nil
	}
	if s.Local, err = parseProcAddrPort(local); err != nil {
		return s, false, err
	}
	if s.Remote, err = parseProcAddrPort(remote); err != nil {
		return s, false, err
	}
	queues := field[4]
	j := bytes.IndexByte(queues, ':')
	if j < 0 {
		return s, false, fmt.Errorf("queues %q: want tx:rx", queues)
	}
	rx, perr := strconv.ParseUint(string(queues[j+1:]), 16, 32)
	if perr != nil {
		return s, false, fmt.Errorf("rx_queue %q: %w", queues[j+1:], perr)
	}
	s.RxQueue = uint32(rx)
	uid, perr := strconv.ParseUint(string(field[7]), 10, 32)
	if perr != nil {
		return s, false, fmt.Errorf("uid %q: %w", field[7], perr)
	}
	s.UID = uint32(uid)
	if s.Inode, perr = strconv.ParseUint(string(field[9]), 10, 64); perr != nil {
		return s, false, fmt.Errorf("inode %q: %w", field[9], perr)
	}
	return s, true, nil
}

// parseProcAddrPort parses "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6).
func parseProcAddrPort(b []byte) (netip.AddrPort, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q has no port", b)
	}
	hexAddr := b[:i]
	port, err := strconv.ParseUint(string(b[i+1:]), 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port in %q: %w", b, err)
	}
	var raw [16]byte
	switch len(hexAddr) {
	case 8, 32:
		for w := 0; w < len(hexAddr)/8; w++ {
			word, err := strconv.ParseUint(string(hexAddr[w*8:w*8+8]), 16, 32)
			if err != nil {
				return netip.AddrPort{}, fmt.Errorf("address %q: %w", b, err)
			}
			binary.NativeEndian.PutUint32(raw[w*4:], uint32(word))
		}
	default:
		return netip.AddrPort{}, fmt.Errorf("address %q: want 8 or 32 hex digits", b)
	}
	var addr netip.Addr
	if len(hexAddr) == 8 {
		addr = netip.AddrFrom4([4]byte(raw[:4]))
	} else {
		addr = netip.AddrFrom16(raw).Unmap()
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// splitFields fills field with the first len(field) space-separated fields of line and
// returns how many it found, without allocating: the table has a line per socket.
func splitFields(line []byte, field [][]byte) int {
	n := 0
	for i := 0; i < len(line) && n < len(field); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\n') {
			i++
		}
		start := i
		for i < len(line) && line[i] != ' ' && line[i] != '\n' {
			i++
		}
		if i > start {
			field[n] = line[start:i]
			n++
		}
	}
	return n
}
