//go:build race

package envoysim

// The race detector slows the emulator's walk over every stat about tenfold.
const raceEnabled = true
