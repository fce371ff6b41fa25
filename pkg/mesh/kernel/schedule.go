package kernel

import (
	"fmt"
	"time"

	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// When a poll reads the socket table: the counters are read at every poll, the table only when
// they moved, and not even then while the traffic is dense (counted ahead instead) or, past
// the lag bound, while only holders that never learn move them.

// DenseReadPolls is how many polls apart the table is read while the traffic is dense: the
// latest two reads each found activity that counts since the poll before it and nothing
// else, and the counters move at every poll. A read walks the node's whole connection hash
// and formats tcp_info for every watched connection (about 5 ms of CPU at 2,000 connections
// here, docs: cost per poll), so reading at every such poll would cost that much. In between,
// each poll at which the counters moved counts one activity ahead of the read that will name
// it (credit), so the rule sees arrivals at every poll as before: the read then adds only what
// the credit did not already show, and a poll at which the counters stand still reads at
// once. Counting ahead can only lengthen the wait: credit the read does not confirm stays in
// the counter. Where the latest read counted mostly accepts (a connection per request), only
// an accept counts ahead: after the last request the closing connections' segments still move
// InSegs, and such a poll reads instead. With 8, a dense poll costs about a ninth of a read.
// Past the lag bound nothing is counted ahead: there, the data of holders that never learn
// moves the counters and counts nothing, and counting it ahead would hold the hook for them;
// such polls read, until a read finds only holders (readHoldersOnly).
const DenseReadPolls = 8

// denseAfterReads is how many reads in a row must find dense traffic: one busy poll is not
// yet a pattern.
const denseAfterReads = 2

// tcpInfoResolution is how much earlier than it came tcp_info can date data: it counts
// milliseconds since the last data in jiffies (10 ms at HZ=100).
const tcpInfoResolution = 10 * time.Millisecond

// readMode is how a poll at which the counters moved since the latest read decides whether
// to read the table. It changes only after a read (readSchedule.afterRead).
type readMode uint8

const (
	// readOnMove: the table is read at once.
	readOnMove readMode = iota
	// readDense: the traffic is dense (denseAfterReads reads in a row found activity that
	// counts since the poll before each, and nothing that does not): a poll at which the
	// counters moved since the poll before counts one activity ahead of the read, up to
	// DenseReadPolls polls apart.
	readDense
	// readDenseAccepts: dense traffic that opens a connection per request (the latest read
	// counted mostly accepts): only an accept moves its counters ahead of a read, as a
	// closing connection's segments move InSegs too.
	readDenseAccepts
	// readHoldersOnly: the latest read, past the lag bound, found no open connection that
	// counts (one a client opened past the bound), and the data it found on old connections
	// was all sent past the bound (their clients are named as never learning): only holders,
	// and whatever is not a client's, move the counters, and only an accept (or one still
	// unnamed) is read.
	readHoldersOnly
)

// readSchedule is the read mode and what it is worked out from.
type readSchedule struct {
	mode readMode
	// denseReads counts the latest reads in a row that found dense traffic; unread the polls
	// since the latest read.
	denseReads int
	unread     int
}

// readResult is what one read of the table found: its time, and what the read schedule and
// the final event take from it.
type readResult struct {
	at         time.Time // the read's time
	countersAt time.Time // when it read the counters: no accept they hold came later
	// counted is the latest activity that counts it found (zero: none), uncounted that it
	// found some that does not.
	counted   time.Time
	uncounted bool
	// accepts and data count the new connections and the data on open ones it counted;
	// oldBefore says it found data on an old connection sent before the bound.
	accepts, data int
	oldBefore     bool
	// holdersOnly: past the bound, it found only holders (readHoldersOnly).
	holdersOnly bool
}

// afterRead is the one transition of the read mode: the read r found what it found, and the
// poll before it was at prevPoll.
func (s *readSchedule) afterRead(r readResult, prevPoll time.Time) {
	if !r.counted.IsZero() && !r.counted.Before(prevPoll.Add(-tcpInfoResolution)) && !r.uncounted {
		s.denseReads++
	} else {
		s.denseReads = 0
	}
	s.unread = 0
	onAccepts := r.accepts > 0 && r.accepts >= r.data
	switch {
	case r.holdersOnly:
		// Past the bound, where nothing is counted ahead.
		s.mode = readHoldersOnly
	case s.denseReads >= denseAfterReads && onAccepts:
		s.mode = readDenseAccepts
	case s.denseReads >= denseAfterReads:
		s.mode = readDense
	default:
		s.mode = readOnMove
	}
}

// pollAction is what a poll whose counters moved since the latest read does.
type pollAction uint8

const (
	readTable  pollAction = iota
	skipRead              // only holders moved them (readHoldersOnly)
	countAhead            // dense traffic: one activity counted ahead of the read
)

// atPoll decides for a poll whose counters moved since the latest read (now; sincePoll at
// the poll before): toName says that they hold accepts since the read, or some are still
// unnamed.
func (s *readSchedule) atPoll(sincePoll, now sockets.TCPCounters, toName, pastBound bool) pollAction {
	switch s.mode {
	case readHoldersOnly:
		if !toName {
			// Past the bound only a connection opened past it counts, and there was none
			// open: segments without an accept are the holders' data or closes, which count
			// nothing (those that sent were named at the read that found it), and a read would
			// cost a walk of the whole connection table at every poll while they send. An old
			// connection idle until now that sends again is not named, and changes nothing else.
			return skipRead
		}
	case readDense, readDenseAccepts:
		moved := sincePoll != now
		if s.mode == readDenseAccepts {
			// The requests come on new connections: a poll without an accept may show only
			// the last ones closing, and is read rather than counted ahead.
			moved = sincePoll.PassiveOpens != now.PassiveOpens
		}
		if moved && s.unread < DenseReadPolls-1 && !pastBound {
			s.unread++
			return countAhead
		}
	}
	return readTable
}

// poll reads the counters, and the table when they moved since the latest read, as the read
// schedule says.
func (k *Kernel) poll() error {
	now := k.opts.Now()
	defer func() { k.prevPoll = now }()
	counters, err := sockets.ReadTCPCounters(k.opts.SNMPPath)
	if err != nil {
		return fmt.Errorf("--mesh none: reading the pod's TCP counters: %w", err)
	}
	sincePoll := k.counters
	k.counters = counters
	if counters == k.atRead && k.unattributed == 0 {
		return nil
	}
	toName := counters.PassiveOpens != k.atRead.PassiveOpens || k.unattributed != 0
	switch k.schedule.atPoll(sincePoll, counters, toName, k.pastBound(now)) {
	case skipRead:
		return nil
	case countAhead:
		k.credit[k.creditPort]++
		k.activity[k.creditPort]++
		k.movedAt = k.opts.Now()
		return nil
	}
	return k.read(now)
}

// read reads the table at now and moves the read schedule on by what it found.
func (k *Kernel) read(now time.Time) error {
	r, err := k.readTable(now)
	if err != nil {
		return err
	}
	k.schedule.afterRead(r, k.prevPoll)
	// Credit this read did not confirm stays in the counter (it only lengthened the wait),
	// and pays for nothing later.
	clear(k.credit)
	return nil
}

// readTable takes the destruction records, reads the table, then the counters: an accept
// after the read is in the counters and named at the next read, never the other way round.
func (k *Kernel) readTable(now time.Time) (readResult, error) {
	var final []sockets.Socket
	if k.gone != nil {
		final, _ = k.gone.Take()
	}
	socks, err := k.opts.Reader.Read(k.readPorts)
	if err != nil {
		return readResult{}, fmt.Errorf("--mesh none: reading the socket table: %w", err)
	}
	counters, err := sockets.ReadTCPCounters(k.opts.SNMPPath)
	if err != nil {
		return readResult{}, fmt.Errorf("--mesh none: reading the pod's TCP counters: %w", err)
	}
	r := &readResult{at: now, countersAt: k.opts.Now()}
	k.reads++
	k.conns.NextRead()
	namedNew, namedLate := k.observeTable(r, socks)
	for _, f := range final {
		namedLate += k.record(r, f)
	}
	k.synRecv.Expire(k.reads)
	k.forgetUnseen()
	k.account(r, counters, namedNew, namedLate)
	k.counters, k.atRead, k.lastRead = counters, counters, now
	r.holdersOnly = k.pastBound(now) && !k.countedOpen() && !r.oldBefore
	return *r, nil
}
