//go:build race

package podsim

// The race detector slows the simulator tenfold: the tests that run a world in real time run
// it at a larger time scale.
const raceEnabled = true
