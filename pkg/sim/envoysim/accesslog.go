package envoysim

import (
	"fmt"
	"strconv"
	"time"
)

// AccessLogEntry is one request as the sidecar's access log records it, so that a run can
// count what the user sees today (e.g. "503 UF upstream connect error" lines).
type AccessLogEntry struct {
	Start    time.Time
	Duration time.Duration
	Port     int // the inbound target port
	Method   string
	Path     string
	Code     int    // 0 when no response was sent (DC)
	Flags    string // Envoy response flags: "-", "UF", "UC", "DC", ...
	Body     string // first bytes of a local reply (Envoy-generated), "" otherwise
}

// responseCodeDetails is what Istio's access log prints after the flags.
func (e AccessLogEntry) responseCodeDetails() string {
	switch e.Flags {
	case "UF":
		return "upstream_reset_before_response_started{connection_failure}"
	case "UC":
		if e.Body != "" {
			return "upstream_reset_before_response_started{connection_termination}"
		}
		return "upstream_reset_after_response_started{connection_termination}"
	case "DC":
		return "downstream_remote_disconnect"
	default:
		return "via_upstream"
	}
}

// AccessLog returns a copy of every access log entry so far.
func (s *Sidecar) AccessLog() []AccessLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]AccessLogEntry(nil), s.accessLog...)
}

const maxLocalReplyBody = 128

// logRequest records a finished request: the access log, and Istio's
// istio_requests_total{reporter="destination"}, which is counted on completion.
func (s *Sidecar) logRequest(e AccessLogEntry, l *inboundListener) {
	if len(e.Body) > maxLocalReplyBody {
		e.Body = e.Body[:maxLocalReplyBody]
	}
	s.mu.Lock()
	s.accessLog = append(s.accessLog, e)
	s.mu.Unlock()
	switch {
	case s.cfg.Profile == ProfileIstio116:
		s.store.telemetryV2Counter("istio_requests_total", istioRequestLabels(l.port, e)).inc()
	case s.cfg.Profile.istio():
		s.store.customCounter("istiocustom", "istio_requests_total", istioRequestLabels(l.port, e)).inc()
	}
	if s.cfg.AccessLog == nil {
		return
	}
	code := strconv.Itoa(e.Code)
	// Istio's default TEXT access log format, with the fields a sidecar knows here.
	line := fmt.Sprintf("[%s] \"%s %s HTTP/1.1\" %s %s %s - \"-\" 0 %d %d - \"-\" \"-\" \"-\" \"-\" \"%s\" %s - %s - - default\n",
		e.Start.UTC().Format("2006-01-02T15:04:05.000Z"), e.Method, e.Path, code, e.Flags, e.responseCodeDetails(),
		len(e.Body), e.Duration.Milliseconds(), l.port.AppAddr, l.port.ClusterName, l.addr)
	s.writeAccessLog(line)
}

// logConnection records a TCP proxy connection in the access log: Istio's TCP format has no
// method, path or code, only the flags (UF when the app refused it).
func (s *Sidecar) logConnection(e AccessLogEntry, t *tcpListener) {
	s.mu.Lock()
	s.accessLog = append(s.accessLog, e)
	s.mu.Unlock()
	if s.cfg.AccessLog == nil {
		return
	}
	s.writeAccessLog(fmt.Sprintf("[%s] \"- - -\" 0 %s - - \"-\" 0 0 %d - \"-\" \"-\" \"-\" \"-\" \"%s\" %s - %s - - -\n",
		e.Start.UTC().Format("2006-01-02T15:04:05.000Z"), e.Flags, e.Duration.Milliseconds(), t.port.AppAddr, t.port.ClusterName, t.addr))
}

func (s *Sidecar) writeAccessLog(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.cfg.AccessLog.Write([]byte(line))
}

// istioRequestLabels are the labels of istio_requests_total as a destination sidecar reports
// them; workload identities are fixed, since nothing here knows them.
func istioRequestLabels(port InboundPort, e AccessLogEntry) []label {
	flags := e.Flags
	code := strconv.Itoa(e.Code)
	return []label{
		{"reporter", "destination"},
		{"source_workload", "unknown"},
		{"source_canonical_service", "unknown"},
		{"source_canonical_revision", "latest"},
		{"source_workload_namespace", "unknown"},
		{"source_principal", "unknown"},
		{"source_app", "unknown"},
		{"source_version", "unknown"},
		{"source_cluster", "unknown"},
		{"destination_workload", "app"},
		{"destination_workload_namespace", "default"},
		{"destination_principal", "unknown"},
		{"destination_app", "app"},
		{"destination_version", "unknown"},
		{"destination_service", "app.default.svc.cluster.local"},
		{"destination_canonical_service", "app"},
		{"destination_canonical_revision", "latest"},
		{"destination_service_name", "app"},
		{"destination_service_namespace", "default"},
		{"destination_cluster", "Kubernetes"},
		{"destination_port", strconv.Itoa(port.Port)},
		{"request_protocol", "http"},
		{"response_code", code},
		{"grpc_response_status", ""},
		{"response_flags", flags},
		{"connection_security_policy", "none"},
	}
}
