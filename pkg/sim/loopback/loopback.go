// Package loopback stands client pods in on one machine: each dials from its own 127.x.y.z
// address, which Linux routes to lo without any setup, so that the pod's socket table tells
// the clients apart as it tells client pods apart by their IPs.
package loopback

import (
	"net"
	"strconv"
	"syscall"
	"time"
)

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT (include/uapi/linux/in.h), which
// package syscall does not name.
const ipBindAddressNoPort = 24

// Dialer dials from source. It binds the source address without a port and lets connect
// choose the port, as Envoy does for an upstream source address, because bind with port 0
// may hand out a port that a listener holds on another loopback address: a client socket
// 127.0.3.45:P would then sit in the socket table beside the pod's listener 127.0.0.1:P and
// be read as one of the pod's inbound connections, which no real pod shows (its sidecar's
// listener holds the port on every address). connect skips every port that a socket holds by
// bind, listeners included; a listener opened later with port 0 could still take a client's
// port, which is why the simulated pod opens its listener before any client dials.
func Dialer(source net.IP, timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout:   timeout,
		LocalAddr: &net.TCPAddr{IP: source},
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); cerr != nil {
				return cerr
			}
			return err
		},
	}
}

// RefusingAddr holds a port of 127.0.0.1 on which nothing listens, until release: a connection
// to it is refused (the kernel answers its SYN with a reset), as to an app that is not
// listening. A closed listener's port would do so only until another socket took it, which
// a busy machine's other tests do; a socket bound without SO_REUSEADDR keeps the port from
// every other bind and from connect's choice of local ports.
func RefusingAddr() (addr string, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, err
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), func() { syscall.Close(fd) }, nil
}
