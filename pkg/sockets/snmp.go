package sockets

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// TCPCounters are the TCP counters of the pod's network namespace, from /proc/net/snmp
// (world-readable, per namespace: net/ipv4/proc.c snmp_seq_show_tcp_udp). They count what no
// read of the socket table can miss: a connection accepted and closed between two reads is
// still in PassiveOpens.
type TCPCounters struct {
	// PassiveOpens counts the inbound handshakes completed (TCP_MIB_PASSIVEOPENS, raised as the
	// kernel creates the accepted socket), on every port of the namespace, probes included.
	PassiveOpens uint64
	// InSegs counts every TCP segment received, on any connection: when it stands still,
	// nothing arrived anywhere, and the socket table would say what it said.
	InSegs uint64
}

// DefaultSNMPPath is where the namespace's counters are read in a pod.
const DefaultSNMPPath = "/proc/net/snmp"

// ReadTCPCounters reads the TCP counters of path (DefaultSNMPPath in a pod).
func ReadTCPCounters(path string) (TCPCounters, error) {
	f, err := os.Open(path)
	if err != nil {
		return TCPCounters{}, err
	}
	defer f.Close()
	c, err := ParseTCPCounters(f)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseTCPCounters reads the "Tcp:" header and value lines of /proc/net/snmp.
func ParseTCPCounters(r io.Reader) (TCPCounters, error) {
	sc := bufio.NewScanner(r)
	var header [][]byte
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("Tcp: ")) {
			continue
		}
		if header == nil {
			header = bytes.Fields(bytes.Clone(line))
			continue
		}
		values := bytes.Fields(line)
		if len(values) != len(header) {
			return TCPCounters{}, fmt.Errorf("Tcp: %d names but %d values", len(header), len(values))
		}
		var c TCPCounters
		found := 0
		for i, name := range header {
			var dst *uint64
			switch string(name) {
			case "PassiveOpens":
				dst = &c.PassiveOpens
			case "InSegs":
				dst = &c.InSegs
			default:
				continue
			}
			v, err := strconv.ParseUint(string(values[i]), 10, 64)
			if err != nil {
				return TCPCounters{}, fmt.Errorf("Tcp: %s: %w", name, err)
			}
			*dst = v
			found++
		}
		if found != 2 {
			return TCPCounters{}, fmt.Errorf("no Tcp: PassiveOpens and InSegs")
		}
		return c, nil
	}
	if err := sc.Err(); err != nil {
		return TCPCounters{}, err
	}
	return TCPCounters{}, fmt.Errorf("no Tcp: lines")
}
