package httpwire

import (
	"errors"
	"net"
	"sync"
)

// acceptor is what Server and H2Server share: the listeners they accept on, whether they are
// closing, and the lock that guards both (and each server's own connection set).
type acceptor struct {
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	closing   bool
}

// acceptLoop accepts on ln until the server closes. admit is called with mu held for each
// accepted connection, to register it, and returns what starts serving it once mu is
// released. The server's init has made the listener set. An accept that times out is
// retried; any other error ends the loop.
func (a *acceptor) acceptLoop(ln net.Listener, admit func(net.Conn) (start func())) error {
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	a.listeners[ln] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.listeners, ln)
		a.mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			a.mu.Lock()
			closing := a.closing
			a.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		a.mu.Lock()
		if a.closing {
			a.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		start := admit(c)
		a.mu.Unlock()
		start()
	}
}
