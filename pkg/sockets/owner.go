package sockets

// Owned keeps, of each read, the sockets owned by one user: the sidecar's. Under Istio's
// TPROXY interception the clients' connections are accepted on the app's ports, where the
// app's own connections from its sidecar sit too, with the same client addresses (Envoy's
// original_src listener filter keeps them); only the owner tells them apart. A socket without
// an owner (Socket.OwnerKnown: TIME_WAIT, closed by its process) is dropped when it is a
// connection already seen owned by another user, and kept otherwise.
type Owned struct {
	UID uint32

	read    int
	foreign map[connKey]foreignConn
}

type foreignConn struct {
	id   connID
	seen int
}

// Keep filters socks in place and returns what is left.
func (o *Owned) Keep(socks []Socket) []Socket {
	if o.foreign == nil {
		o.foreign = make(map[connKey]foreignConn)
	}
	o.read++
	kept := socks[:0]
	for _, s := range socks {
		if s.OwnerKnown() && s.UID == o.UID {
			kept = append(kept, s)
			continue
		}
		k := connKey{s.Local, s.Remote}
		if s.OwnerKnown() {
			o.foreign[k] = foreignConn{idOf(s), o.read}
			continue
		}
		if f, known := o.foreign[k]; known && f.id.same(s) {
			f.seen = o.read
			o.foreign[k] = f
			continue
		}
		kept = append(kept, s)
	}
	for k, f := range o.foreign {
		if f.seen != o.read {
			delete(o.foreign, k)
		}
	}
	return kept
}
