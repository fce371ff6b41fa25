// Package localhttptest holds test helpers for code that calls the pod's loopback.
package localhttptest

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusingURL is an http URL on 127.0.0.1 that refuses every connection for as long as the
// test runs (RefusingAddr).
func RefusingURL(t testing.TB) string {
	t.Helper()
	return "http://" + RefusingAddr(t)
}

// RefusingAddr is an address on 127.0.0.1 that refuses every connection for as long as the
// test runs: its port is held by a socket that is bound and never listens, which keeps it
// from every other bind and from connect's choice of local ports. A closed server's port
// would not do: on a busy machine another test's socket can be given it, and a "nothing
// listens here" case then finds something.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
