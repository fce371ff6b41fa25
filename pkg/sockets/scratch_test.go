package sockets

import (
	"syscall"
	"testing"
	"time"
)

func ru() (time.Duration, time.Duration) {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano()), time.Duration(r.Stime.Nano())
}

func readVariant(ports []uint16, noInfo bool, buf []byte, socks []Socket) []Socket {
	fd, _ := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_INET_DIAG)
	defer syscall.Close(fd)
	req := diagRequest(ports, 1)
	if noInfo {
		req[syscall.NLMSG_HDRLEN+3] = 0
	}
	syscall.Sendto(fd, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
	socks, _ = receiveDump(fd, buf, 1, socks[:0])
	return socks
}

func TestScratchSplit(t *testing.T) {
	b := &testing.B{}
	port := benchServer(b)
	buf := make([]byte, 32<<10)
	socks := make([]Socket, 0, 4096)
	for _, noInfo := range []bool{false, true} {
		for _, ports := range [][]uint16{{port}, {1}} {
			readVariant(ports, noInfo, buf, socks)
			u0, s0 := ru()
			const n = 300
			var got int
			for range n {
				got = len(readVariant(ports, noInfo, buf, socks))
			}
			u1, s1 := ru()
			t.Logf("noInfo=%v ports %v (%d): user %.0f µs sys %.0f µs per read", noInfo, ports, got, float64(u1-u0)/n/1e3, float64(s1-s0)/n/1e3)
		}
	}
}
