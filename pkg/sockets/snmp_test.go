package sockets

import (
	"strings"
	"testing"
)

const snmpSample = `Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 100
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 12 345 0 1 4 6789 6000 0 0 3 0
Udp: InDatagrams NoPorts
Udp: 1 2
`

func TestParseTCPCounters(t *testing.T) {
	c, err := ParseTCPCounters(strings.NewReader(snmpSample))
	if err != nil {
		t.Fatal(err)
	}
	if c.PassiveOpens != 345 || c.InSegs != 6789 {
		t.Fatalf("got %+v, want PassiveOpens 345, InSegs 6789", c)
	}
	for _, bad := range []string{"", "Tcp: PassiveOpens\nTcp: x\n", "Tcp: A B\nTcp: 1\n", "Tcp: ActiveOpens\nTcp: 1\n"} {
		if _, err := ParseTCPCounters(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadTCPCountersOfThisNamespace(t *testing.T) {
	if _, err := ReadTCPCounters(DefaultSNMPPath); err != nil {
		t.Skipf("no %s here: %v", DefaultSNMPPath, err)
	}
	if _, err := ReadTCPCounters("/nonexistent/snmp"); err == nil {
		t.Fatal("a missing file read without error")
	}
}
