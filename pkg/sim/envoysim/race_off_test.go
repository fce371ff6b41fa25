//go:build !race

package envoysim

const raceEnabled = false
