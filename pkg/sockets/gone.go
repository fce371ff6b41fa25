package sockets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// GoneWatch collects the kernel's last word on each connection of the watched ports as it
// frees it: inet_diag broadcasts every TCP socket it destroys, with its final tcp_info, to the
// NETLINK_SOCK_DIAG multicast groups SKNLGRP_INET_TCP_DESTROY and SKNLGRP_INET6_TCP_DESTROY
// (net/core/sock_diag.c sock_diag_broadcast_destroy; net/ipv4/inet_diag.c
// inet_diag_handler_get_info). The kernel lets any user join them (NL_CFG_F_NONROOT_RECV),
// and it broadcasts only within the network namespace, so in a pod it sees the pod's sockets.
//
// Why: a connection gone from the table between two reads may have carried a request before
// its client closed it (a draining Envoy's Connection: close makes a client close right after
// its response), and the table no longer shows it. Its final bytes received do. Without them
// a vanished connection can only be judged by whether any request reached the pod meanwhile,
// which a single busy client makes true for every other client's close.
//
// A socket is unhashed (gone from a dump) just before it is freed and broadcast, from a work
// queue: a read can miss a connection whose record has not come yet (Tracker.Closed says how
// that is handled). Safe for concurrent use.
type GoneWatch struct {
	file *os.File
	rc   syscall.RawConn
	done chan struct{}
	// added is poked at every record added, for Await.
	added chan struct{}

	// recvMu is held across a non-blocking receive and the adding of what it got, by the
	// receiving goroutine and by Take, so that Take has every record the kernel had queued.
	recvMu sync.Mutex
	buf    []byte

	mu    sync.Mutex
	final []Socket
	// lost: the kernel dropped records (the receive buffer overran) or too many piled up
	// since the last Take; the next Take says so.
	lost bool
	err  error // why receiving stopped (os.ErrClosed after Close)
}

// Multicast groups of NETLINK_SOCK_DIAG (include/uapi/linux/sock_diag.h enum
// sknetlink_groups), as bind(2) takes them: bit group-1.
const (
	sknlgrpInetTCPDestroy  = 1
	sknlgrpInet6TCPDestroy = 3
	sockDiagByFamily       = 20 // SOCK_DIAG_BY_FAMILY, the type of a broadcast record
	// maxGoneRecords bounds what waits between two Takes; past it records are dropped and
	// the loss said, as when the kernel drops them.
	maxGoneRecords = 100_000
)

// WatchGone joins the destroy broadcasts for the sockets whose local port is one of ports
// (filtered in the kernel by a socket filter) and collects them until Close.
func WatchGone(ports []uint16) (*GoneWatch, error) {
	if len(ports) == 0 || len(ports) > 200 {
		return nil, fmt.Errorf("watching %d ports for closed connections: want 1 to 200", len(ports))
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, syscall.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("opening a NETLINK_SOCK_DIAG socket: %w", err)
	}
	if err := attachFilter(fd, goneFilter(ports)); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("filtering the socket destroy broadcasts by port: %w", err)
	}
	groups := uint32(1<<(sknlgrpInetTCPDestroy-1) | 1<<(sknlgrpInet6TCPDestroy-1))
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: groups}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("joining the socket destroy broadcasts: %w", err)
	}
	// Non-blocking and handed to the runtime's poller, so that Close ends the receiving
	// goroutine.
	w := &GoneWatch{file: os.NewFile(uintptr(fd), "sock_diag destroy broadcasts"), done: make(chan struct{}),
		added: make(chan struct{}, 1), buf: make([]byte, 32<<10)}
	rc, err := w.file.SyscallConn()
	if err != nil {
		w.file.Close()
		return nil, err
	}
	w.rc = rc
	go w.receive()
	return w, nil
}

// Take returns the connections freed since the previous Take, each as the kernel last saw it
// (State Close, no inode, tcp_info whose bytes received may include the peer's FIN), and
// whether none was lost meanwhile.
func (w *GoneWatch) Take() (final []Socket, complete bool) {
	w.receiveQueued()
	w.mu.Lock()
	defer w.mu.Unlock()
	final, w.final = w.final, nil
	complete = !w.lost && w.err == nil
	w.lost = false
	return final, complete
}

// Close leaves the broadcasts and ends the receiving goroutine.
func (w *GoneWatch) Close() error {
	err := w.file.Close()
	<-w.done
	return err
}

// Await waits until the records of the connections with these cookies have come, or d has
// passed: the kernel drops a socket from the table just before it frees it and broadcasts
// its record from a work queue, so a read can find a connection gone whose record is still
// on its way.
func (w *GoneWatch) Await(cookies []uint64, d time.Duration) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		w.receiveQueued()
		w.mu.Lock()
		missing := len(cookies)
		for _, s := range w.final {
			if slices.Contains(cookies, s.Cookie) {
				missing--
			}
		}
		stopped := w.err != nil
		w.mu.Unlock()
		if missing <= 0 || stopped {
			return
		}
		select {
		case <-w.added:
		case <-deadline.C:
			return
		}
	}
}

func (w *GoneWatch) receive() {
	defer close(w.done)
	for {
		var failed error
		err := w.rc.Read(func(uintptr) bool {
			// Receive until the queue is empty, then wait for the poller to say more came:
			// returning true here would only bring Read straight back, spinning on a CPU.
			for {
				more, err := w.receiveOne()
				if err != nil {
					failed = err
					return true
				}
				if !more {
					return false
				}
			}
		})
		if err == nil {
			err = failed
		}
		if err != nil {
			// Closed (os.ErrClosed), or the poller failed: no record comes any more, and a
			// connection still awaited must be judged without one.
			w.stop(err)
			return
		}
	}
}

// receiveQueued adds every record the kernel has queued on the socket.
func (w *GoneWatch) receiveQueued() {
	for {
		more := false
		var failed error
		if err := w.rc.Control(func(uintptr) { more, failed = w.receiveOne() }); err != nil || failed != nil || !more {
			return
		}
	}
}

// receiveOne receives one datagram without waiting and adds its records; more says one was
// there, and failed why receiving cannot go on.
func (w *GoneWatch) receiveOne() (more bool, failed error) {
	w.recvMu.Lock()
	defer w.recvMu.Unlock()
	var n int
	var err error
	ctlErr := w.rc.Control(func(fd uintptr) { n, _, err = syscall.Recvfrom(int(fd), w.buf, syscall.MSG_DONTWAIT) })
	switch {
	case ctlErr != nil:
		return false, ctlErr
	case errors.Is(err, syscall.EAGAIN):
		return false, nil
	case errors.Is(err, syscall.EINTR):
		return true, nil
	case errors.Is(err, syscall.ENOBUFS):
		// The receive buffer overran: some records are lost.
		w.mu.Lock()
		w.lost = true
		w.mu.Unlock()
		return true, nil
	case err != nil:
		return false, err
	}
	w.add(w.buf[:n])
	return true, nil
}

func (w *GoneWatch) stop(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// add parses the records of one datagram.
func (w *GoneWatch) add(b []byte) {
	ne := binary.NativeEndian
	received := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		select {
		case w.added <- struct{}{}:
		default:
		}
	}()
	for len(b) >= syscall.NLMSG_HDRLEN {
		msgLen := int(ne.Uint32(b[0:]))
		if msgLen < syscall.NLMSG_HDRLEN || msgLen > len(b) {
			w.lost = true
			return
		}
		if ne.Uint16(b[4:]) == sockDiagByFamily {
			s, err := parseDiagMsg(b[syscall.NLMSG_HDRLEN:msgLen])
			switch {
			case err != nil || len(w.final) >= maxGoneRecords:
				w.lost = true
			default:
				s.Freed = received
				w.final = append(w.final, s)
			}
		}
		aligned := (msgLen + syscall.NLMSG_ALIGNTO - 1) &^ (syscall.NLMSG_ALIGNTO - 1)
		if aligned >= len(b) {
			return
		}
		b = b[aligned:]
	}
}

// goneFilter is a classic BPF program that keeps a broadcast record whose socket's local port
// (inet_diag_msg's idiag_sport, big-endian, right after the netlink header and the family,
// state, timer and retrans bytes) is one of ports: a pod's other connections (the app's
// outgoing calls, the sidecar's upstreams) never reach the process.
func goneFilter(ports []uint16) []syscall.SockFilter {
	const (
		ldHalfAbs = syscall.BPF_LD | syscall.BPF_H | syscall.BPF_ABS
		jeq       = syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K
		ret       = syscall.BPF_RET | syscall.BPF_K
	)
	prog := []syscall.SockFilter{{Code: ldHalfAbs, K: syscall.NLMSG_HDRLEN + 4}}
	for i, p := range ports {
		// Jump to "keep" (past the remaining comparisons and the "drop") on a match.
		prog = append(prog, syscall.SockFilter{Code: jeq, Jt: uint8(len(ports) - i), K: uint32(p)})
	}
	return append(prog, syscall.SockFilter{Code: ret, K: 0}, syscall.SockFilter{Code: ret, K: 0xffff_ffff})
}

// attachFilter is setsockopt(SO_ATTACH_FILTER), which package syscall offers only through
// its deprecated AttachLsf.
func attachFilter(fd int, prog []syscall.SockFilter) error {
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := syscall.Syscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_ATTACH_FILTER,
		uintptr(unsafe.Pointer(&fprog)), unsafe.Sizeof(fprog), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// GoneWatcher is a Reader that can also watch the connections it reads being freed.
type GoneWatcher interface {
	WatchGone(ports []uint16) (*GoneWatch, error)
}

// WatchGone watches the destroy broadcasts (see GoneWatch).
func (DiagReader) WatchGone(ports []uint16) (*GoneWatch, error) { return WatchGone(ports) }

// WatchGone watches the destroy broadcasts while inet_diag is in use: once the reader has
// fallen back to /proc, netlink is refused and its reads carry no cookie to match them by.
func (a *AutoReader) WatchGone(ports []uint16) (*GoneWatch, error) {
	a.mu.Lock()
	usingProcs := a.usingProcs
	a.mu.Unlock()
	if usingProcs {
		return nil, errors.New("the socket table is read from /proc: inet_diag is refused")
	}
	if g, ok := a.Diag.(GoneWatcher); ok {
		return g.WatchGone(ports)
	}
	return nil, errors.New("this reader cannot watch connections being freed")
}
