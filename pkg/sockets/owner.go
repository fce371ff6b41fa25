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
	foreign map[ConnKey]foreignConn
}

type foreignConn struct {
	id   ConnID
	seen int
}

// Keep filters socks in place and returns what is left.
func (o *Owned) Keep(socks []Socket) []Socket {
	kept, _ := o.KeepRead(socks, nil)
	return kept
}

// KeepRead filters a read and the records of the connections freed just before it
// (GoneWatch.Take), both in place. A record has no owner: it is kept unless it is of a
// connection last seen owned by another user, as a socket without an owner is. One that no
// read showed is kept too, which under an owner filter may be an app's own brief connection.
func (o *Owned) KeepRead(socks, final []Socket) (keptSocks, keptFinal []Socket) {
	if o.foreign == nil {
		o.foreign = make(map[ConnKey]foreignConn)
	}
	o.read++
	keptSocks = socks[:0]
	for _, s := range socks {
		if o.keep(s) {
			keptSocks = append(keptSocks, s)
		}
	}
	keptFinal = final[:0]
	for _, s := range final {
		if o.keep(s) {
			keptFinal = append(keptFinal, s)
		}
	}
	for k, f := range o.foreign {
		if f.seen != o.read && f.seen != o.read-1 {
			delete(o.foreign, k)
		}
	}
	return keptSocks, keptFinal
}

// KeepLate filters, in place, records taken after the read KeepRead last filtered, against
// what that read showed.
func (o *Owned) KeepLate(final []Socket) []Socket {
	if o.foreign == nil {
		o.foreign = make(map[ConnKey]foreignConn)
	}
	kept := final[:0]
	for _, s := range final {
		if o.keep(s) {
			kept = append(kept, s)
		}
	}
	return kept
}

// keep says whether s is the sidecar's, and remembers the connections of other users.
func (o *Owned) keep(s Socket) bool {
	if s.OwnerKnown() && s.UID == o.UID {
		return true
	}
	k := KeyOf(s)
	if s.OwnerKnown() {
		o.foreign[k] = foreignConn{IDOf(s), o.read}
		return false
	}
	if f, known := o.foreign[k]; known && f.id.Same(s) {
		f.seen = o.read
		o.foreign[k] = f
		return false
	}
	return true
}
