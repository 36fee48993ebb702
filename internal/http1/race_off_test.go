//go:build !race

package http1

const raceEnabled = false
