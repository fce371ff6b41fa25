// Package loopback stands client pods in on one machine: each dials from its own 127.x.y.z
// address, which Linux routes to lo without any setup, so that the pod's socket table tells
// the clients apart as it tells client pods apart by their IPs.
package loopback

import (
	"net"
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
