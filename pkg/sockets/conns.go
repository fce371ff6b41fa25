package sockets

import "net/netip"

// What a connection is, for every reader of the table that follows connections from read to
// read (the per-client evidence's Tracker and the meshless backend, pkg/mesh/kernel): its
// identity, the bytes it has received, and the memory of one gone from the table whose
// destruction record is still to come. One definition, so that a fix to any of them holds
// for both.

// ConnKey names a connection at one time by its two ends; a later connection may reuse them,
// which its ConnID tells apart.
type ConnKey struct{ Local, Remote netip.AddrPort }

// KeyOf names s's connection.
func KeyOf(s Socket) ConnKey { return ConnKey{s.Local, s.Remote} }

// ConnID is what tells two connections on the same ends apart: the socket's cookie
// (inet_diag), else its inode (/proc, where the inode goes to 0 once the app closes the
// socket).
type ConnID struct{ Inode, Cookie uint64 }

// IDOf is s's identity.
func IDOf(s Socket) ConnID { return ConnID{s.Inode, s.Cookie} }

// Same reports whether s can be the connection id was taken from: the ids agree wherever
// both are known.
func (id ConnID) Same(s Socket) bool {
	if id.Cookie != 0 && s.Cookie != 0 {
		return id.Cookie == s.Cookie
	}
	if id.Inode != 0 && s.Inode != 0 {
		return id.Inode == s.Inode
	}
	return true
}

// Update takes what s knows of the identity: a later read can bring the cookie or inode an
// earlier one lacked.
func (id *ConnID) Update(s Socket) {
	if s.Cookie != 0 {
		id.Cookie = s.Cookie
	}
	if s.Inode != 0 {
		id.Inode = s.Inode
	}
}

// Received is what the latest read with tcp_info showed a connection had received: new bytes
// at a later read, or in its destruction record, are data on an open connection.
type Received struct {
	Bytes uint64
	Have  bool   // a read had tcp_info
	Segs  uint32 // data segments received (0: unknown)
}

// ReceivedBy is what s has received, as a first read shows it.
func ReceivedBy(s Socket) Received {
	return Received{Bytes: s.BytesReceived, Have: s.HasTCPInfo, Segs: s.DataSegsIn}
}

// Grew records what the read s shows and reports whether the bytes grew since the last read
// that had them. A read without tcp_info changes nothing.
func (r *Received) Grew(s Socket) bool {
	if !s.HasTCPInfo {
		return false
	}
	more := r.Have && s.BytesReceived > r.Bytes
	*r = Received{Bytes: s.BytesReceived, Have: true, Segs: s.DataSegsIn}
	return more
}

// InRecord says whether the destruction record f shows data received since the last read
// that counted bytes: more than the FIN the record's count may hold.
func (r Received) InRecord(f Socket) bool {
	return r.Have && f.HasTCPInfo && f.BytesReceived > r.Bytes+1
}

// VanishedReads is how many reads a connection gone from the table is remembered by its
// cookie: its destruction record comes from the kernel's work queue just after the socket
// left the table, within one read unless the queue lags a whole read interval. A record that
// finds it is the record of a connection a read showed, never one opened and closed unseen.
const VanishedReads = 3

// VanishedConns remembers the connections gone from the table, by cookie, with what the reader
// keeps of each, for VanishedReads reads.
type VanishedConns[T any] struct{ gone map[uint64]vanishedConn[T] }

type vanishedConn[T any] struct {
	conn T
	read int
}

// Remember keeps conn, gone at read; a connection without a cookie cannot be found again.
func (v *VanishedConns[T]) Remember(cookie uint64, conn T, read int) {
	if cookie == 0 {
		return
	}
	if v.gone == nil {
		v.gone = map[uint64]vanishedConn[T]{}
	}
	v.gone[cookie] = vanishedConn[T]{conn, read}
}

// Has says whether the connection with this cookie is remembered.
func (v *VanishedConns[T]) Has(cookie uint64) bool {
	_, ok := v.gone[cookie]
	return ok && cookie != 0
}

// Take returns and forgets the connection with this cookie.
func (v *VanishedConns[T]) Take(cookie uint64) (T, bool) {
	g, ok := v.gone[cookie]
	if !ok || cookie == 0 {
		var none T
		return none, false
	}
	delete(v.gone, cookie)
	return g.conn, true
}

// Expire forgets the connections gone VanishedReads or more reads before read.
func (v *VanishedConns[T]) Expire(read int) {
	for cookie, g := range v.gone {
		if read-g.read >= VanishedReads {
			delete(v.gone, cookie)
		}
	}
}

// FromThePod says whether s comes from the pod itself: from a loopback address to a
// non-loopback one (another container of the pod, a local health check). A socket whose own
// end is on loopback (a listener on 127.0.0.1, as the simulator's is) keeps its loopback
// clients.
func (s Socket) FromThePod() bool {
	return s.Remote.Addr().IsLoopback() && !s.Local.Addr().IsLoopback()
}
