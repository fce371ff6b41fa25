package drain

// RiskFrom counts the clients a risk figure came from (Decision.RiskFrom): each may still
// route to the pod. Unseen is the client nobody has seen yet.
//
// Stand-in for h39-c1's definition in rule.go, so that the prestop side of --risk builds
// on its own: the merge deletes this file.
type RiskFrom struct{ Unseen, Holding, Sending, NoEvidence int }
