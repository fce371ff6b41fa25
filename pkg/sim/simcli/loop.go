package simcli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshdrain/meshdrain/pkg/operator/output"
	"github.com/meshdrain/meshdrain/pkg/sim/requestloop"
)

// loopOptions are the flags of meshdrain-sim loop.
type loopOptions struct {
	loop   requestloop.Options
	mode   string
	output string
}

func defaultLoopOptions() loopOptions {
	return loopOptions{
		loop:   requestloop.Options{Method: "GET", Workers: 1, Interval: 200 * time.Millisecond, Timeout: 2 * time.Second},
		mode:   string(requestloop.KeepAlive),
		output: output.Text,
	}
}

// newLoopCommand builds `meshdrain-sim loop`: the request loop a rollout is checked with.
func newLoopCommand(s streams) *cobra.Command {
	opts := defaultLoopOptions()
	cmd := &cobra.Command{
		Use:   "loop URL [flags]",
		Short: "Send requests to a URL in a loop during a rollout and report every failure by kind",
		Long: `loop sends requests to URL until it is interrupted (Ctrl-C), --duration has passed or --count
requests were sent, then reports how many failed and how: refused (nothing listened),
reset, closed (the server closed the connection before answering), timeout, the status of
each 5xx answer (an ingress's 502: its upstream refused or reset), other. Each kind has its
count and the first and last time it was seen, as an offset from the start and as UTC time
of day, to match with the pods' logs. A rollout is clean when the loop saw no failure; the
exit code is then 0, else 1.

--mode keep-alive (the default) reuses each worker's connection, as pooled clients and
proxies do: a connection opened before a pod's removal keeps going to that pod, so the loop
sees what the app's shutdown does to kept-alive clients. --mode new-connection opens one
per request (Connection: close), as a curl loop does: each request is routed afresh, so the
loop sees the endpoint propagation. Run both. --method POST shows the race of a kept-alive
connection closed as a request goes out, which Go's client retries for a GET but not for a
POST.

Run it where it reaches the Service as its clients do: through the ingress from outside,
or inside the cluster (the binary is static: kubectl cp it into a debug pod).
docs/meshless.md tells the whole check.`,
		Example: `  # during kubectl rollout restart deployment/web, from outside through the ingress:
  meshdrain-sim loop https://web.example.com/healthz --duration 3m
  # inside the cluster, each request on a new connection, 4 workers every 100ms:
  meshdrain-sim loop http://web.shop.svc/healthz --mode new-connection --workers 4 --interval 100ms`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.loop.URL = args[0]
			opts.loop.Mode = requestloop.Mode(opts.mode)
			opts.loop.Method = strings.ToUpper(opts.loop.Method)
			if err := opts.loop.Validate(); err != nil {
				return usageError("loop: %v", err)
			}
			if opts.output != output.Text && opts.output != output.JSON {
				return usageError("loop: -o %q: want text or json", opts.output)
			}
			rep, err := requestloop.Run(cmd.Context(), opts.loop)
			if err != nil {
				return &ExitError{Code: ExitFailure, Err: fmt.Errorf("loop: %w", err)}
			}
			if opts.output == output.JSON {
				data, err := json.MarshalIndent(rep.ToJSON(), "", "  ")
				if err != nil {
					return err
				}
				_, err = s.out.Write(append(data, '\n'))
				if err != nil {
					return err
				}
			} else if err := requestloop.WriteText(s.out, rep); err != nil {
				return err
			}
			if rep.Failures() > 0 {
				return &ExitError{Code: ExitFailure, Err: fmt.Errorf("loop: %d of %d requests failed", rep.Failures(), rep.Requests)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.mode, "mode", opts.mode, "keep-alive (reuse each worker's connection) or new-connection (one per request)")
	f.StringVar(&opts.loop.Method, "method", opts.loop.Method, "the requests' method: GET is retried by Go's client on a kept-alive connection the server closed, POST is not")
	f.IntVar(&opts.loop.Workers, "workers", opts.loop.Workers, "concurrent senders, each with its own connection in keep-alive mode")
	f.DurationVar(&opts.loop.Interval, "interval", opts.loop.Interval, "each worker's time from one request's start to the next's")
	f.DurationVar(&opts.loop.Timeout, "timeout", opts.loop.Timeout, "each request's bound: no answer by then is a timeout")
	f.DurationVar(&opts.loop.Duration, "duration", 0, "stop after this long (default: until interrupted)")
	f.IntVar(&opts.loop.Count, "count", 0, "stop after this many requests in all (default: no limit)")
	f.StringVarP(&opts.output, "output", "o", opts.output, "text or json")
	return cmd
}
