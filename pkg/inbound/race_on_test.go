//go:build race

package inbound

const raceEnabled = true
