package drain

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// riskFields are the final event's risk (the figure at the stop: the probability that some
// client still routed to the pod then) and risk_from (the clients it came from), both null
// without a lag distribution; risk is null too when no poll was judged (no sidecar, no
// signal).
func (c *coordinator) riskFields() []zap.Field {
	if c.cfg.Lag.IsZero() {
		return []zap.Field{zap.Reflect("risk", nil), zap.Reflect("risk_from", nil)}
	}
	return []zap.Field{optionalField("risk", c.result.Risk), zap.Object("risk_from", c.result.RiskFrom)}
}

// riskNow is the "waiting" event's risk: the figure at the latest poll, so that a long wait
// says how far it is from --risk. Skipped without a lag distribution.
func (c *coordinator) riskNow() zap.Field {
	if c.cfg.Lag.IsZero() {
		return zap.Skip()
	}
	return optionalField("risk", c.result.Risk)
}

// MarshalLogObject writes the clients as the final event's risk_from.
func (f RiskFrom) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("unseen", f.Unseen)
	enc.AddInt("holding", f.Holding)
	enc.AddInt("sending", f.Sending)
	enc.AddInt("no_evidence", f.NoEvidence)
	return nil
}
