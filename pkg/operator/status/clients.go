package status

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshdrain/meshdrain/pkg/hook/evidence"
	"github.com/meshdrain/meshdrain/pkg/sockets"
)

// Client is one client address of the inbound listener, as the socket table shows it since
// status started watching (docs/decision-rule.md, "Per-client evidence").
type Client struct {
	Address string `json:"address"`
	// State: holding (keeps a connection it had when the watch began, idle since: it still
	// routes here), sending (new connections or data since), left (closed such a connection
	// itself: it applied the endpoint removal), no-evidence.
	State string `json:"state"`
	// Open counts its connections open at this sample (ESTABLISHED), with one gone whose
	// close the kernel has not reported yet (judged at the next sample).
	Open int `json:"open_connections"`
	// Since is when status first saw it; LastData when it last sent (or may have); LeftAt
	// when it was seen to leave.
	Since    time.Time  `json:"since"`
	LastData *time.Time `json:"last_data,omitempty"`
	LeftAt   *time.Time `json:"left_at,omitempty"`
	// Without a sidecar (--mesh none), the kernel's view: NewConnections it opened since the
	// first sample, the latest at LastNewConnection; LastSentOnOld when it last sent on a
	// connection already open at the first sample (a client routed per connection keeps
	// sending there whatever its routing learns). States there: opening (its latest activity
	// was a new connection), sending (data on open connections), idle, ignored
	// (--ignore-source, or the pod itself).
	NewConnections    *int       `json:"new_connections,omitempty"`
	LastNewConnection *time.Time `json:"last_new_connection,omitempty"`
	LastSentOnOld     *time.Time `json:"last_sent_on_old,omitempty"`
}

// maxClientRows bounds the text table; JSON lists every client.
const maxClientRows = 20

// withClients adds the clients to a sample, or why there are none to show.
func withClients(r *Report, w ClientWatch, now time.Time) {
	clients, err := w.Clients(now, r.Listener, r.traffic, r.drainSeen)
	if err != nil {
		r.ClientsError = err.Error()
		return
	}
	counts := evidence.CountClients(clients)
	r.counts = &counts
	r.Clients = make([]Client, 0, len(clients))
	for _, c := range clients {
		row := Client{Address: c.Addr.String(), State: c.State.String(), Open: c.Open, Since: c.FirstSeen}
		if !c.LastData.IsZero() {
			row.LastData = &c.LastData
		}
		if c.State == sockets.Left {
			row.LeftAt = &c.LeftAt
		}
		r.Clients = append(r.Clients, row)
	}
	// Those that still route here first: holding, sending, then the rest.
	order := map[string]int{"holding": 0, "sending": 1, "no-evidence": 2, "left": 3}
	slices.SortStableFunc(r.Clients, func(a, b Client) int {
		return cmp.Or(cmp.Compare(order[a.State], order[b.State]), strings.Compare(a.Address, b.Address))
	})
}

// writeClients is the text report's clients section.
func writeClients(b *strings.Builder, r Report) {
	if r.ClientsError != "" {
		fmt.Fprintf(b, "\nclients: none shown: %s\n", r.ClientsError)
		return
	}
	if r.Clients == nil {
		return
	}
	counts := clientCounts(r.Clients)
	fmt.Fprintf(b, "\nclients of the inbound listener: %d holding, %d sending, %d left, %d no evidence (since the first sample)\n",
		counts["holding"], counts["sending"], counts["left"], counts["no-evidence"])
	if len(r.Clients) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tSTATE\tOPEN\tSEEN FOR\tLAST SENT")
	for i, c := range r.Clients {
		if i == maxClientRows {
			fmt.Fprintf(tw, "... %d more (-o json lists them all)\t\t\t\t\n", len(r.Clients)-i)
			break
		}
		last := "-"
		if c.LastData != nil {
			last = r.SampledAt.Sub(*c.LastData).Round(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", c.Address, c.State, c.Open, r.SampledAt.Sub(c.Since).Round(time.Second), last)
	}
	_ = tw.Flush()
}

// clientCounts counts the clients by state.
func clientCounts(clients []Client) map[string]int {
	counts := map[string]int{}
	for _, c := range clients {
		counts[c.State]++
	}
	return counts
}
