package loopback

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// ipLocalPortRange is Linux's IP_LOCAL_PORT_RANGE (6.3+): the ports one socket may be given.
const ipLocalPortRange = 51

// onlyPort narrows d's choice of local port to port, after d's own Control.
func onlyPort(t *testing.T, d *net.Dialer, port int) {
	inner := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		if inner != nil {
			if err := inner(network, address, c); err != nil {
				return err
			}
		}
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipLocalPortRange, port|port<<16)
		}); cerr != nil {
			return cerr
		}
		if errors.Is(err, syscall.ENOPROTOOPT) {
			t.Skip("the kernel has no IP_LOCAL_PORT_RANGE (Linux 6.3+), which this test needs to choose the port")
		}
		return err
	}
}

// A client pod's socket never takes the port of the pod's listener. Left to bind, the kernel
// gives a client bound to 127.0.0.9 the port that a listener holds on 127.0.0.1 (the socket
// table would then show it among the listener's connections); Dialer lets connect choose, and
// connect skips it. The port range of the dialing socket is narrowed to that one port, so
// both outcomes are certain. Dialer goes first, while only the listener holds the port.
func TestClientNeverTakesTheListenersPort(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	d := Dialer(net.IPv4(127, 0, 0, 10), 2*time.Second)
	onlyPort(t, d, port)
	c, err := d.Dial("tcp4", other.Addr().String())
	if err == nil {
		got := c.LocalAddr().(*net.TCPAddr)
		c.Close()
		t.Fatalf("Dialer connected from %v, the port of the listener on 127.0.0.1", got)
	}
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("Dialer limited to the listener's port: %v, want EADDRNOTAVAIL", err)
	}

	plain := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9)}, Timeout: 2 * time.Second}
	onlyPort(t, plain, port)
	c, err = plain.Dial("tcp4", other.Addr().String())
	if err != nil {
		t.Fatalf("a plain dialer from 127.0.0.9 limited to port %d: %v", port, err)
	}
	got := c.LocalAddr().(*net.TCPAddr).Port
	_ = c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT left on the port
	c.Close()
	if got != port {
		t.Fatalf("a plain dialer took port %d, not the listener's %d: the clash Dialer avoids is not shown", got, port)
	}
}

func TestDialerLeavesFromItsSource(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dialer(net.IPv4(127, 0, 0, 9), 2*time.Second).Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ip := c.LocalAddr().(*net.TCPAddr).IP; !ip.Equal(net.IPv4(127, 0, 0, 9)) {
		t.Fatalf("left from %v, want 127.0.0.9", ip)
	}
}
