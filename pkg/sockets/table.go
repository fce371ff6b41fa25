// Package sockets reads the pod's TCP socket table for the inbound listener's ports and turns
// successive reads into per-client evidence of whether each client has let go of the pod.
//
// A client's Envoy sidecar closes its idle pooled connections to an endpoint when it applies
// the EDS update that removes it (envoyproxy/envoy source/common/upstream/cluster_manager_impl.cc
// removeHosts → drainConnPools). The draining pod's own Envoy tells only connections that carry
// a request to close (envoyproxy/envoy#14350). So a connection that was open when the drain
// began and has carried nothing since shows, while it stays open, that its client still routes
// to the pod, and, once its client closes it, that the client has applied the removal.
//
// meshdrain runs in the app container, which shares the pod's network namespace, so the
// sidecar's inbound sockets are visible without any capability, in two ways: NETLINK_SOCK_DIAG
// (DiagReader, the default: filtered in the kernel, with tcp_info's bytes received) and
// /proc/net/tcp{,6} (ProcReader, the fallback: state and queues only). A connection that
// opens or closes between two reads shows in the kernel's broadcast of the sockets it frees,
// with their final tcp_info (GoneWatch, over inet_diag too).
//
// Without bytes received (/proc), a read cannot tell an idle connection from one that carried
// requests since the drain began. The Tracker then errs both ways: an old connection still in
// use counts as held (which only keeps the app up longer), and one that a client closed after
// using it counts as a client letting go (an HTTP/2 client closing after the pod's GOAWAY).
package sockets

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// State is a TCP state, numbered as in the kernel's include/net/tcp_states.h, which both
// /proc/net/tcp (column st) and inet_diag (idiag_state) report.
type State uint8

// TCP states. Which side sent the first FIN shows in them: the side that closes first goes
// through FinWait1/FinWait2 into TimeWait; the side that receives the first FIN goes through
// CloseWait and LastAck and then disappears without a TIME_WAIT.
const (
	Established State = 1 + iota
	SynSent
	SynRecv
	FinWait1
	FinWait2
	TimeWait
	Close
	CloseWait
	LastAck
	Listen
	Closing
	NewSynRecv
)

var stateNames = [...]string{
	Established: "ESTABLISHED", SynSent: "SYN_SENT", SynRecv: "SYN_RECV",
	FinWait1: "FIN_WAIT1", FinWait2: "FIN_WAIT2", TimeWait: "TIME_WAIT", Close: "CLOSE",
	CloseWait: "CLOSE_WAIT", LastAck: "LAST_ACK", Listen: "LISTEN", Closing: "CLOSING",
	NewSynRecv: "NEW_SYN_RECV",
}

func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("STATE_%d", uint8(s))
}

// Socket is one TCP connection of the pod whose local port is a watched port.
type Socket struct {
	// Local is the pod's end (the listener's port), Remote the client's. IPv4 clients of a
	// dual-stack listener are reported with plain IPv4 addresses, not IPv4-mapped IPv6 ones,
	// so that a client has one address whichever socket family accepted it.
	Local, Remote netip.AddrPort
	State         State
	// Inode is the socket's inode number; 0 once the application has closed its end (orphaned
	// FIN_WAIT, LAST_ACK, CLOSING sockets) and for TIME_WAIT.
	Inode uint64
	// Cookie is the kernel's socket cookie (inet_diag only, else 0). It survives the
	// application's close and is carried into the TIME_WAIT socket, so it names one
	// connection across reads better than the inode does.
	Cookie uint64
	// UID owns the socket: the user of the process that opened it, or of the listener that
	// accepted it. The kernel reports 0 for sockets that belong to no process any more
	// (OwnerKnown).
	UID uint32
	// RxQueue is the number of received bytes the application has not read yet, plus one
	// once the peer's FIN is in (the kernel counts sequence numbers: CLOSE_WAIT shows 1).
	RxQueue uint32
	// HasTCPInfo says whether BytesReceived, SinceLastDataRecv and SinceLastDataSent are
	// known: only inet_diag reports them, and only for full sockets (not TIME_WAIT or
	// SYN_RECV).
	HasTCPInfo bool
	// BytesReceived is tcpi_bytes_received (Linux >= 4.1): payload bytes received since the
	// connection was established. The kernel's count includes the peer's FIN, which the
	// reader takes off so that a close does not look like data.
	BytesReceived uint64
	// SinceLastDataRecv is tcpi_last_data_recv: how long ago the last payload arrived (or
	// the connection was established, if none has).
	SinceLastDataRecv time.Duration
	// SinceLastDataSent is tcpi_last_data_sent: how long ago the pod's side last sent
	// payload (its response), or the connection was established.
	SinceLastDataSent time.Duration
	// NothingSent: tcp_info says the pod's side has sent no data on the connection yet
	// (tcpi_data_segs_out, Linux >= 4.6; false when unknown).
	NothingSent bool
	// DataSegsIn is tcpi_data_segs_in (Linux >= 4.6; 0 when unknown): segments that carried
	// payload, about one per small request, which bytes received cannot count.
	DataSegsIn uint32
	// Freed is when the kernel's record of this freed connection reached meshdrain
	// (GoneWatch); zero for the sockets of a read. The record's tcp_info times count back
	// from the moment the kernel freed it, a little before.
	Freed time.Time
}

// Answered says, from tcp_info, that the pod's side sent data no earlier than the last data
// it received, at least idle ago, and nothing has come since: an HTTP/1.1 connection between
// requests, its last response sent. tcp_info counts in jiffies, so a response sent within
// one of its request has the same time. False without tcp_info.
func (s Socket) Answered(idle time.Duration) bool {
	return s.HasTCPInfo && s.BytesReceived > 0 && !s.NothingSent &&
		s.SinceLastDataSent <= s.SinceLastDataRecv && s.SinceLastDataSent >= idle
}

// DataAt is when the last data of s arrived, for a read taken at read: tcp_info counts back
// from the read, or, for a freed connection's record, from when the record came (Freed),
// which is no earlier than the kernel freed it (a read's time may be: the records are taken
// with the read), so the time is never earlier than the truth. Without tcp_info, the read's
// time is the latest it can have been.
func (s Socket) DataAt(read time.Time) time.Time {
	switch {
	case !s.HasTCPInfo:
		return read
	case !s.Freed.IsZero():
		return s.Freed.Add(-s.SinceLastDataRecv)
	}
	return read.Add(-s.SinceLastDataRecv)
}

// closedBy is, for the record s of a freed connection, a time no earlier than its close:
// when the record came (Freed), or, for one without that time (the zero Socket where there is
// no record), the read it is taken with.
func (s Socket) closedBy(read time.Time) time.Time {
	if s.Freed.IsZero() {
		return read
	}
	return s.Freed
}

// DataBefore says whether the record s of a freed connection shows data that all arrived
// before t: a connection of before t, whatever it did after.
func (s Socket) DataBefore(t time.Time) bool {
	return s.HasTCPInfo && s.BytesReceived > 0 && !s.Freed.IsZero() && s.DataAt(s.Freed).Before(t)
}

// OwnerKnown says whether UID names the socket's owner. TIME_WAIT and request sockets belong to
// no process, nor does a connection its process has closed (inode 0): once the peer has
// acknowledged the close, the kernel keeps a FIN_WAIT2 one as a TIME_WAIT-type socket that both
// readers report owned by 0.
func (s Socket) OwnerKnown() bool {
	return s.State != TimeWait && s.State != SynRecv && s.State != NewSynRecv && s.Inode != 0
}

// Reused says, from tcp_info, that data arrived after the pod's side had sent some: the
// client sent a request on a connection that had carried an answered one, as a pool does and
// a client opening a connection per request never does. False without tcp_info.
func (s Socket) Reused() bool {
	return s.HasTCPInfo && s.BytesReceived > 0 && !s.NothingSent && s.SinceLastDataRecv < s.SinceLastDataSent
}

// InFlight says, from tcp_info, that data arrived after the pod's side last sent, or that it
// has sent nothing yet: a request not answered (or a request body still coming). A first
// request that follows the handshake within a jiffy has the connection's own time, which is
// why NothingSent is asked. False without tcp_info.
func (s Socket) InFlight() bool {
	return s.HasTCPInfo && s.BytesReceived > 0 && (s.NothingSent || s.SinceLastDataRecv < s.SinceLastDataSent)
}

// Reader reads the sockets of the pod's network namespace whose local port is one of ports,
// listening sockets left out. The ports are meant to be listeners' ports outside the
// ephemeral range (net.ipv4.ip_local_port_range), such as Istio's 15006: an outgoing
// connection whose local port happens to be a watched port would be read too.
// Implementations are safe for concurrent use.
type Reader interface {
	Read(ports []uint16) ([]Socket, error)
}

// ListenerReader reads the listening sockets on ports, whose UID says who accepts there; with
// no ports, every listening socket of the namespace.
type ListenerReader interface {
	Listeners(ports []uint16) ([]Socket, error)
}

// ErrUnavailable is wrapped by the error of a Reader that cannot read the socket table at all
// (every way refused), as opposed to one read that failed. Callers stop reading and say so once.
var ErrUnavailable = errors.New("the TCP socket table cannot be read")

// AutoReader reads with inet_diag and falls back to /proc/net/tcp{,6} for good the first time
// inet_diag fails (typically a seccomp profile or an LSM refusing NETLINK_SOCK_DIAG), so that a
// pod without netlink still gets connection states, without bytes received.
type AutoReader struct {
	Diag Reader
	Proc Reader

	mu         sync.Mutex
	fellBack   error // why inet_diag was given up; nil while it is used
	unusable   error // set once neither works
	usingProcs bool
}

// NewReader returns the default reader: inet_diag with /proc as its fallback.
func NewReader() *AutoReader {
	return &AutoReader{Diag: DiagReader{}, Proc: ProcReader{}}
}

// Read reads with inet_diag, or with /proc once inet_diag has failed. If both fail, the error
// wraps ErrUnavailable and every later Read returns it at once.
func (a *AutoReader) Read(ports []uint16) ([]Socket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.unusable != nil {
		return nil, a.unusable
	}
	if !a.usingProcs {
		socks, err := a.Diag.Read(ports)
		if err == nil {
			return socks, nil
		}
		a.fellBack = err
	}
	socks, err := a.Proc.Read(ports)
	if err == nil {
		a.usingProcs = true
		return socks, nil
	}
	if !a.usingProcs {
		a.unusable = fmt.Errorf("%w: inet_diag: %v; /proc: %v", ErrUnavailable, a.fellBack, err)
		return nil, a.unusable
	}
	return nil, err
}

// Listeners reads the listening sockets with inet_diag, or with /proc once inet_diag has
// failed (for Read too).
func (a *AutoReader) Listeners(ports []uint16) ([]Socket, error) {
	a.mu.Lock()
	usingProcs := a.usingProcs
	a.mu.Unlock()
	var diagErr error
	if !usingProcs {
		if d, ok := a.Diag.(ListenerReader); ok {
			socks, err := d.Listeners(ports)
			if err == nil {
				return socks, nil
			}
			diagErr = err
		}
	}
	p, ok := a.Proc.(ListenerReader)
	if !ok {
		return nil, errors.New("this reader cannot read listening sockets")
	}
	socks, err := p.Listeners(ports)
	if err != nil && diagErr != nil {
		return nil, fmt.Errorf("inet_diag: %v; /proc: %w", diagErr, err)
	}
	return socks, err
}

// FellBack returns why inet_diag was given up for /proc, or nil while inet_diag is in use.
func (a *AutoReader) FellBack() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.usingProcs {
		return nil
	}
	return a.fellBack
}

func watched(ports []uint16, port uint16) bool {
	for _, p := range ports {
		if p == port {
			return true
		}
	}
	return false
}
