//go:build race

package drain

// The race detector slows the single-goroutine property test tenfold without adding to what
// it checks; it then runs a tenth of the traces.
const raceEnabled = true
