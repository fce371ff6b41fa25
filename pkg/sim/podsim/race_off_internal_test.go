//go:build !race

package podsim

const raceEnabled = false
