package kernel

import (
	"net/netip"
	"slices"
	"time"
)

// Client is what the kernel shows of one source address since the watch began: the live
// per-client view of status, and the names in prestop's final event.
type Client struct {
	Addr netip.Addr
	// Ignored: an --ignore-source address, or the pod itself; never a client.
	Ignored bool
	// FirstSeen is the first read that showed one of its connections.
	FirstSeen time.Time
	// Open is its established connections at the latest read.
	Open int
	// NewConns counts the connections it opened since the watch began, LastNewConn the read
	// that showed the latest; NewPastBound those opened past the lag bound (its routing had
	// not learnt, or it addresses the pod directly).
	NewConns     int
	LastNewConn  time.Time
	NewPastBound int
	// AddressesPod: its opens past the bound kept the period it opened at before the bound
	// (at least three, the first across it): a caller that addresses the pod directly (a
	// monitor, a scraper), which never learns; past the bound its activity counts nothing
	// unless Options.WaitPastBoundOpeners (cadence.go).
	AddressesPod bool
	// LastData is when data from it last arrived on a connection that was already open
	// (tcp_info), zero if none was seen.
	LastData time.Time
	// OldData is the latest data on a connection opened before the lag bound (before the
	// watch began, without one); SendingOldSince, the first such data past the bound: a
	// client routed per connection, which will not learn.
	OldData         time.Time
	SendingOldSince time.Time
	// Counted: some of its activity counted (it kept, or could have kept, the hook).
	Counted bool
}

// NeverLearns says whether the client sent, past the lag bound, on a connection opened
// before it.
func (c Client) NeverLearns() bool { return !c.SendingOldSince.IsZero() }

// Clients returns every client seen, by address.
func (k *Kernel) Clients() []Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Client, 0, len(k.clients))
	for _, c := range k.clients {
		out = append(out, Client{Addr: c.addr, Ignored: c.ignored, FirstSeen: c.firstSeen, Open: c.open,
			NewConns: c.newConns, LastNewConn: c.lastNewConn, NewPastBound: c.newPastBound, AddressesPod: c.opens.direct(), LastData: c.lastData,
			OldData: c.oldData, SendingOldSince: c.sendingOldSince, Counted: c.counted})
	}
	slices.SortFunc(out, func(a, b Client) int { return a.Addr.Compare(b.Addr) })
	return out
}

// Summary is the kernel's own account of a watch, for the final event and status.
type Summary struct {
	// LastActivity is the kind of the latest activity that counted (Activity*), and
	// LastActivityAt when.
	LastActivity   string
	LastActivityAt time.Time
	// UnknownAccepts counts the accepts PassiveOpens counted that nothing named.
	UnknownAccepts int
	// LastLearning is the latest activity that counted and may have come from a client still
	// to learn of the removal: all of it but the data, on connections opened before the lag
	// bound, of the clients since seen to never learn (they went on sending on those past
	// it); the watch's start when there is none. Past the bound, the rule's settled window
	// runs from it.
	LastLearning time.Time
	// Listening are the pod's listening ports; NotListening the --port ones among them
	// nobody listens on.
	Listening, NotListening []int
	// Limits say what this pod's kernel could not give (no destruction records, no tcp_info).
	Limits []string
	// App is what the app's own request counter gave (--app-metrics); nil without one.
	App *AppSummary
}

// Summary returns the watch's account so far.
func (k *Kernel) Summary() Summary {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Summary{LastActivity: k.lastKind, LastActivityAt: k.lastActivity, UnknownAccepts: k.unknownAccepts,
		LastLearning: later(k.opts.Start, k.lastUnknown), App: k.appSummary()}
	if s.App != nil && !k.tcpInfo {
		// Where the table shows no data on open connections, the app's requests beyond the
		// kernel's activity came before the bound from clients it cannot name, which may have
		// been learning. With tcp_info, each of them is data a read attributes to its client
		// (and so to LastLearning, or not, as that client's) a read later at most: the app's
		// lead is one of timing.
		s.LastLearning = later(s.LastLearning, s.App.LastAdded)
	}
	for _, c := range k.clients {
		if c.ignored || !c.counted {
			continue
		}
		last := c.lastCountedAction
		if !c.sendingOldSince.IsZero() {
			last = c.lastCountedOther
		}
		s.LastLearning = later(s.LastLearning, last)
	}
	for _, p := range k.listening {
		s.Listening = append(s.Listening, int(p))
	}
	for _, p := range k.opts.Ports {
		if !slices.Contains(k.listening, uint16(p)) {
			s.NotListening = append(s.NotListening, p)
		}
	}
	if k.opened && k.gone == nil && k.goneErr != nil {
		s.Limits = append(s.Limits, "no destruction records ("+k.goneErr.Error()+"): a connection opened and closed between two reads counts as an unknown client's")
	}
	if k.opened && !k.tcpInfo {
		s.Limits = append(s.Limits, "no tcp_info (the table is read from /proc): data on open connections and requests in flight are not seen; only new connections count")
	}
	return s
}
