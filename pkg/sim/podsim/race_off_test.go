//go:build !race

package podsim_test

const raceEnabled = false
