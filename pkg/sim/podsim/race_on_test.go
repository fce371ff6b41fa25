//go:build race

package podsim_test

// The race detector slows the simulator that runs in the test's own process tenfold, and the
// race-built packages tested beside it load the machine: the end-to-end tests start at a
// larger time scale.
const raceEnabled = true
