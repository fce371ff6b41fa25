//go:build !race

package drain

const raceEnabled = false
